"""--engine ray: the same outputs as the process pool, byte for byte, on a local 2-CPU Ray cluster; a unit whose
worker is killed is retried; a failed run leaves nothing under the output's name."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerodoc.run.engine import RayEngine, make
from lerodoc.errors import LerodocError
from lerodoc.ops.convert import convert
from lerodoc.ops.merge import merge, source_selections
from lerodoc.ops.quantiles import quantiles
from lerodoc.ops.validate import validate
from tests.fixtures.factory import make_dataset
from tests.helpers import importable, require, run_cli


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster (2 CPUs) for the whole module: starting Ray takes seconds."""
    require(importable("ray"), "Ray is not installed (the dev extra has it; pip install 'lerodoc[scale]')")
    import ray
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    return {
        "v21": make_dataset(root / "v21", version="v2.1", episodes=6, noise=0.3, cameras=("observation.images.top",),
                            height=32, width=48, lengths=[20, 31, 25, 40, 22, 33]).root,
        "v30": make_dataset(root / "v30", version="v3.0", episodes=7, noise=0.3, cameras=(), seed=3,
                            episodes_per_file=3, dataset_id=1).root,
    }


def tree_digests(root) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.blake2b(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("source,to", [("v21", "v3.0"), ("v30", "v2.1")])
def test_convert_on_ray_writes_the_pool_bytes(cluster, sources, tmp_path, source, to):
    pool = convert(sources[source], tmp_path / "pool", to=to, workers=2)
    on_ray = convert(sources[source], tmp_path / "ray", to=to, engine=RayEngine())
    assert tree_digests(tmp_path / "ray") == tree_digests(tmp_path / "pool")
    assert (on_ray.episodes, on_ray.frames) == (pool.episodes, pool.frames)


def test_merge_on_ray_writes_the_pool_bytes(cluster, sources, tmp_path):
    convert(sources["v30"], tmp_path / "b", to="v2.1", workers=1)     # the same rows in the other layout
    sources_ = [sources["v30"], tmp_path / "b"]
    exclude = source_selections(["B:2"], sources_, "--exclude")
    pool = merge(sources_, tmp_path / "pool", exclude=exclude, workers=2)
    on_ray = merge(sources_, tmp_path / "ray", exclude=exclude, engine=RayEngine())
    assert on_ray.episodes == pool.episodes == 13
    assert tree_digests(tmp_path / "ray") == tree_digests(tmp_path / "pool")


def test_quantiles_on_ray_write_the_pool_bytes_without_gathering_rows(cluster, sources, tmp_path):
    src = sources["v30"]
    in_memory = quantiles(src, tmp_path / "memory", workers=2)               # rows gathered, sorted in place
    by_passes = quantiles(src, tmp_path / "passes", workers=2, budget=50)    # radix selection on this machine
    on_ray = quantiles(src, tmp_path / "ray", engine=RayEngine())            # tally passes on the workers
    assert in_memory.passes == 1 and on_ray.passes > 1 and on_ray.passes == by_passes.passes
    expected = tree_digests(tmp_path / "memory")
    assert tree_digests(tmp_path / "ray") == expected
    # past the budget on this machine the episodes are streamed a data file at a time (ops.stats.StatsStream): the
    # same files, and the dataset mean and std aggregated per file first, equal up to rounding
    passes = tree_digests(tmp_path / "passes")
    assert {k: v for k, v in passes.items() if k != "meta/stats.json"} == \
        {k: v for k, v in expected.items() if k != "meta/stats.json"}
    a, b = (json.loads((tmp_path / name / "meta/stats.json").read_text()) for name in ("memory", "passes"))
    assert a.keys() == b.keys() and all(a[f].keys() == b[f].keys() for f in a)
    for feature in a:
        for stat in a[feature]:
            np.testing.assert_allclose(b[feature][stat], a[feature][stat], rtol=1e-12 if stat in ("mean", "std") else 0)


def test_validate_on_ray_finds_what_the_pool_finds(cluster, sources, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(sources["v21"], bad)
    lines = (bad / "meta/episodes_stats.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["stats"]["observation.state"]["max"][0] += 1.0              # a stated stat the data does not have
    (bad / "meta/episodes_stats.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    data = sorted(bad.glob("data/*/*.parquet"))[2]
    table = pq.read_table(data)
    stamps = table.column("timestamp").to_numpy().copy()
    stamps[5] += 0.5                                                   # a timestamp off the 1/fps grid
    pq.write_table(table.set_column(table.schema.get_field_index("timestamp"), "timestamp",
                                    pa.array(stamps, table.schema.field("timestamp").type)), data)
    for root in [*sources.values(), bad]:
        here, there = validate(root).to_json(), validate(root, engine=RayEngine()).to_json()
        here.pop("seconds"), there.pop("seconds")
        assert there == here
    assert {f["code"][:3] for f in here["findings"]} >= {"STA", "TS0"}


class KillFirstAttempt(RayEngine):
    """Each unit's first attempt kills its own worker process (SIGKILL, as a lost node would): Ray must retry."""

    def __init__(self, markers):
        super().__init__()
        self.markers = str(markers)

    def map(self, fn, items, progress=None):
        markers = self.markers

        def once(numbered):   # runs in the Ray worker; the marker file says "already killed once"
            number, item = numbered
            marker = os.path.join(markers, str(number))
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(item)
        return super().map(once, list(enumerate(items)), progress)


def test_a_killed_worker_is_retried_and_the_output_is_unchanged(cluster, sources, tmp_path):
    (tmp_path / "markers").mkdir()
    convert(sources["v30"], tmp_path / "pool", to="v2.1", workers=2)
    report = convert(sources["v30"], tmp_path / "ray", to="v2.1", engine=KillFirstAttempt(tmp_path / "markers"))
    assert len(list((tmp_path / "markers").iterdir())) >= 3   # every unit was killed once (7 episodes, 3 files)
    assert report.episodes == 7
    assert tree_digests(tmp_path / "ray") == tree_digests(tmp_path / "pool")


def test_a_unit_that_fails_leaves_no_output(cluster, sources, tmp_path):
    src = tmp_path / "src"
    make_dataset(src, version="v2.1", episodes=4, cameras=(), lengths=10)
    last = sorted(src.glob("data/*/*.parquet"))[-1]
    last.write_bytes(last.read_bytes()[:40])     # the driver plans; a worker finds the file unreadable
    with pytest.raises(LerodocError) as caught:
        convert(src, tmp_path / "out", to="v3.0", engine=RayEngine())
    assert "episode_000003.parquet" in caught.value.render()
    assert not any(p.name.startswith((".out", "out")) for p in tmp_path.iterdir())


def test_cli_joins_a_running_cluster_by_address(cluster, sources, tmp_path):
    run_cli("quantiles", sources["v30"], "-o", tmp_path / "pool", "-j", "2")
    out = json.loads(run_cli("quantiles", sources["v30"], "-o", tmp_path / "ray", "--engine", "ray",
                             "--ray-address", cluster, "--json").stdout)
    assert out["output"] == str(tmp_path / "ray")
    assert tree_digests(tmp_path / "ray") == tree_digests(tmp_path / "pool")
    refused = run_cli("convert", sources["v30"], "-o", tmp_path / "x", "--ray-address", cluster, check=False)
    assert refused.returncode == 2 and "--ray-address needs --engine ray" in refused.stderr
    nobody = run_cli("validate", sources["v30"], "--engine", "ray", "--ray-address", "127.0.0.1:1", check=False)
    assert nobody.returncode == 3 and "cannot join the Ray cluster at 127.0.0.1:1" in nobody.stderr


def test_engine_names():
    assert make("pool") is None and isinstance(make("ray", "host:6379"), RayEngine)
    with pytest.raises(LerodocError):
        make("dask")


def test_many_units_go_in_batches_and_come_back_in_order(cluster):
    ticks = []
    assert RayEngine().map(abs, range(-500, 500), progress=ticks.append) == [abs(i) for i in range(-500, 500)]
    assert sum(ticks) == 1000


def test_repeated_values_end_the_selection_early():
    """Ranges that hold one repeated value (constant channels, timestamps, indices) are found from the tallies'
    smallest and largest keys, not after all 8 digits: fewer passes over the data on a cluster."""
    import numpy as np

    from lerodoc.tables.quantiles import key_slices, selected_quantiles
    rng = np.random.default_rng(2)
    data = rng.standard_normal((300_000, 4))
    data[:, 1] = 2.5                                          # constant
    data[:, 2] = np.repeat([0.0, 1 / 30, 2 / 30], 100_000)    # three values, each more than `collect`
    data[:, 3] = np.repeat(np.arange(300), 1000)              # integer-valued
    levels = [0.01, 0.1, 0.5, 0.9, 0.99]
    parts = np.array_split(data, 7)
    values, passes = selected_quantiles(lambda s: s.tally_of(key_slices(parts)), levels, count=len(data),
                                        width=4, collect=5_000)
    assert np.array_equal(values, np.quantile(data, levels, axis=0))
    assert passes <= 5
