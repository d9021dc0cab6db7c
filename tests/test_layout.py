"""The package's layering: no import cycle among lerodoc's modules, and no module reaching into another's
private (underscore) names. Imports inside functions count: a late import hides a cycle, it does not
remove one. So does `importlib.import_module(f"lerodoc.formats.v{...}")`: it imports every module its
constant prefix can name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import lerodoc

PACKAGE = Path(lerodoc.__file__).parent


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file for every module of the package at `root`."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _target(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names."""
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _dynamic_prefix(node: ast.Call) -> str | None:
    """The constant start of an importlib.import_module(...) argument."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called != "import_module" or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return arg.values[0].value
    return None


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def analyse(root: Path) -> tuple[dict[str, set[str]], list[str]]:
    """The import graph of the package at `root` (module -> modules it imports) and every use of another
    module's private name, as 'module:line imports other._name'."""
    mods = modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    private: list[str] = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases: dict[str, str] = {}       # local name -> lerodoc module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _target(name, path, node)
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if full in mods:
                        graph[name].add(full)
                        aliases[alias.asname or alias.name] = full
                    elif target in mods:
                        graph[name].add(target)
                        if _private(alias.name) and target != name:
                            private.append(f"{name}:{node.lineno} imports {target}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods:
                        graph[name].add(alias.name)
                        if alias.asname:
                            aliases[alias.asname] = alias.name
            elif isinstance(node, ast.Call):
                prefix = _dynamic_prefix(node)
                if prefix:
                    graph[name].update(m for m in mods if m.startswith(prefix) and m != name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
                other = aliases.get(node.value.id)
                if other and other != name:
                    private.append(f"{name}:{node.lineno} uses {other}.{node.attr}")
    for edges in graph.values():
        edges.discard(root.name)       # `from lerodoc import x` names the submodule, handled above
    return graph, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    graph, _ = analyse(PACKAGE)
    assert len(graph) > 50, "the package's modules were not found"
    assert cycles(graph) == []


def rooms(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The import graph between rooms: a subpackage (lerodoc.ops, lerodoc.pi05, ...) is one room, a top-level
    module (lerodoc.dataset) another. Imports inside one room are left out."""
    def room(module: str) -> str:
        return ".".join(module.split(".")[:2]) if module != package else module
    out: dict[str, set[str]] = {}
    for module, edges in graph.items():
        out.setdefault(room(module), set()).update(room(e) for e in edges if room(e) != room(module))
    return out


def test_the_rooms_stand_on_floors():
    """Every import points down a floor: the rooms' graph has no cycle, so the rooms can be stacked with every
    arrow pointing down (README's layout block lists them top down)."""
    graph, _ = analyse(PACKAGE)
    assert cycles(rooms(graph, PACKAGE.name)) == []


def test_an_arrow_up_between_rooms_is_found(tmp_path):
    root = _package(tmp_path, {"low/__init__.py": "", "low/a.py": "from pkg.high import b\n",
                               "high/__init__.py": "", "high/b.py": "X = 1\n", "high/c.py": "from pkg.low import a\n"})
    graph, _ = analyse(root)
    assert cycles(graph) == []                                   # no module cycle: a -> b, c -> a
    assert cycles(rooms(graph, root.name)) == [["pkg.high", "pkg.low"]]


def test_no_private_import_across_modules():
    _, private = analyse(PACKAGE)
    assert private == []


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_late_import_cycle_is_found(tmp_path):
    root = _package(tmp_path, {"a.py": "from pkg.b import f\n",
                               "b.py": "def f():\n    from pkg import a  # late\n    return a\n",
                               "c.py": "from pkg import a\n"})
    assert cycles(analyse(root)[0]) == [["pkg.a", "pkg.b"]]


def test_a_dynamic_import_cycle_is_found(tmp_path):
    root = _package(tmp_path, {"fmt/__init__.py": "import importlib\n\ndef module(v):\n"
                                                  "    return importlib.import_module(f'pkg.fmt.v{v}')\n",
                               "fmt/v1.py": "from pkg.model import Episode\n",
                               "model.py": "from pkg import fmt\nclass Episode: ...\n"})
    assert cycles(analyse(root)[0]) == [["pkg.fmt", "pkg.fmt.v1", "pkg.model"]]


def test_private_imports_are_found(tmp_path):
    root = _package(tmp_path, {"a.py": "def _hidden(): ...\n__all__ = []\n",
                               "b.py": "from pkg.a import _hidden, __all__\n",
                               "c.py": "from pkg import a\nx = a._hidden\n",
                               "d.py": "from .a import _hidden\n"})
    assert sorted(analyse(root)[1]) == ["pkg.b:1 imports pkg.a._hidden", "pkg.c:2 uses pkg.a._hidden",
                                        "pkg.d:1 imports pkg.a._hidden"]


# Where video files are read. lerodoc.media.frames opens them for reading (the index of a file's frames, the cursor) and
# lerodoc.media.mp4 parses their boxes; lerodoc.media.video, the stream-copy writer, also demuxes packets and picks
# samples from the sample tables of files it opened through lerodoc.media.frames.
READ_HOME = ("media.frames", "media.mp4")
SAMPLE_HOME = READ_HOME + ("media.video",)


def _writes(call: ast.Call) -> bool:
    """Whether an av.open(...) call opens for writing: mode "w" as its second argument or mode=."""
    modes = call.args[1:2] + [k.value for k in call.keywords if k.arg == "mode"]
    return any(isinstance(m, ast.Constant) and str(m.value).startswith("w") for m in modes)


def video_read_sites(root: Path) -> list[str]:
    """Places outside the frames home that open a video for reading with PyAV (`av.open`, not for writing), or
    demux one or parse its mp4 sample tables (`demux`, `read_track`) outside the home and the stream-copy writer."""
    sites = []
    for name, path in modules(root).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = ast.unparse(node.func)
            if func == "av.open" and not _writes(node):
                home, what = READ_HOME, "av.open"
            elif func.split(".")[-1] in ("demux", "read_track"):
                home, what = SAMPLE_HOME, func.split(".")[-1]
            else:
                continue
            if name not in {f"{root.name}.{m}" for m in home}:
                sites.append(f"{name}:{node.lineno} {what}")
    return sites


def test_videos_are_read_only_in_the_frames_home():
    assert video_read_sites(PACKAGE) == []


def test_a_video_read_outside_the_frames_home_is_found(tmp_path):
    root = _package(tmp_path, {"media/frames.py": "import av\n\ndef f(p):\n    return av.open(p)\n",
                               "media/video.py": "import av\nfrom pkg.media import mp4\n\ndef g(p, c):\n"
                                           "    av.open(p, 'w')\n    return mp4.read_track(p), c.demux()\n",
                               "a.py": "import av\nfrom pkg.media import mp4\n\ndef h(p):\n"
                                       "    with av.open(str(p), metadata_errors='replace') as c:\n"
                                       "        return mp4.read_track(p), list(c.demux(video=0))\n",
                               "b.py": "import av\n\ndef w(p):\n    return av.open(p, mode='w')\n"})
    assert video_read_sites(root) == ["pkg.a:5 av.open", "pkg.a:6 read_track", "pkg.a:6 demux"]


SHARED_OPTION = re.compile(r"\w+: \w+(Opt|Arg) = [^,()]*,")   # `force: ForceOpt = False,` in a command's signature


def repeated_blocks(root: Path, size: int = 6) -> list[list[str]]:
    """Places (file:line) that share `size` or more consecutive identical code lines with another place.
    Lines are compared stripped; blank lines, comments, imports, lone docstring quotes and a command's parameter
    taking a shared option (`SHARED_OPTION`: like an import, it names the one declaration in lerodoc.options) do
    not count."""
    places: dict[tuple[str, ...], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        numbered = [(n, line.strip()) for n, line in enumerate(path.read_text().splitlines(), 1)]
        code = [(n, s) for n, s in numbered if s and not s.startswith(("#", "import ", "from ")) and s != '"""'
                and not SHARED_OPTION.fullmatch(s)]
        for k in range(len(code) - size + 1):
            window = tuple(s for _, s in code[k:k + size])
            places.setdefault(window, []).append(f"{path.relative_to(root.parent)}:{code[k][0]}")
    return [p for p in places.values() if len(p) > 1]


def test_no_repeated_block_of_six_lines():
    assert repeated_blocks(PACKAGE) == []


def test_a_repeated_block_is_found(tmp_path):
    body = "".join(f"    x{i} = f({i})\n" for i in range(6))
    root = _package(tmp_path, {"a.py": "def f(v):\n    return v\n\n\ndef g():\n" + body,
                               "b.py": "def h():\n" + body + "    return x0\n"})
    assert repeated_blocks(root) == [["pkg/a.py:6", "pkg/b.py:2"]]


def test_shared_option_parameters_are_not_a_repeated_block(tmp_path):
    """Commands spell out the shared options they take (`force: ForceOpt = False,`), each a reference to its one
    declaration; a default that calls or computes (`x: XOpt = f(),`) is code and still counts."""
    params = "".join(f"    o{i}: O{i}Opt = None,\n" for i in range(6))
    calls = "".join(f"    o{i}: O{i}Opt = f(),\n" for i in range(5))   # and "):": six lines
    root = _package(tmp_path, {"a.py": "def f(\n" + params + ") -> None:\n    pass\n",
                               "b.py": "def g(\n" + params + ") -> None:\n    return 1\n",
                               "c.py": "def f(\n" + calls + "):\n    pass\n",
                               "d.py": "def g(\n" + calls + "):\n    return 1\n"})
    assert repeated_blocks(root) == [["pkg/c.py:2", "pkg/d.py:2"]]


def output_rule_sites(root: Path) -> list[str]:
    """Places that test 'exactly one of -o and --in-place' themselves (a comparison of `in_place` with whether an
    output was given), outside `staging.output_target`, which holds the rule once."""
    sites = []
    for name, path in modules(root).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and "in_place" in ast.unparse(node) and (
                    "is not None" in ast.unparse(node) or "is None" in ast.unparse(node)):
                sites.append(f"{name}:{node.lineno}")
    return [s for s in sites if not s.startswith(f"{root.name}.promote.staging:")]


def test_the_output_or_in_place_rule_is_written_once():
    assert output_rule_sites(PACKAGE) == []


def test_a_copy_of_the_output_rule_is_found(tmp_path):
    root = _package(tmp_path, {"a.py": "def f(out, in_place):\n    if in_place == (out is not None):\n"
                                       "        raise ValueError\n"})
    assert output_rule_sites(root) == ["pkg.a:2"]


# The stats home: lerodoc.tables.stats, the one module that computes min/max/mean/std of data (the per-episode engine
# `moments`, the aggregation, the dataset stats). A call found elsewhere is a second engine, unless listed in
# NOT_STATS. Sums (.sum(), np.add.reduce) and min/max as methods (.min(), .max()) are left out: timestamps, sizes
# and counts use them everywhere, and a mean or a std cannot be written without one of the calls below.
STATS_HOME = ("tables.stats",)
STAT_CALLS = {"mean", "std", "var", "nanmean", "nanstd", "nanvar", "average",   # numpy (functions and methods)
              "min_max", "stddev", "variance",                                  # pyarrow.compute
              "reduceat"}                                                       # np.add/minimum/maximum.reduceat
NUMPY_REDUCTIONS = {"min", "max", "amin", "amax", "nanmin", "nanmax"}          # np.min(x, ...) and the like
NOT_STATS = {   # module -> calls that look like stats but are not a feature's stats of data
    "checks.stats": {
        "np.max",       # the tolerance's magnitude: max |stat| over a feature's stated min/max/mean
        "tol.std",      # Tolerance.std: how far a std may sit from the exact one
    },
    "ops.encode": {"np.mean"},        # the mean PSNR of a re-encoded clip's sampled frames
    "media.encoding": {"np.mean"},       # PSNR's mean squared error between two frames
    "pi05.model": {"x.float().pow(2).mean"},   # RMSNorm inside the model
    "pi05.metrics": {"np.mean"},      # throughput and MFU averaged over the benchmark's windows
    "report.plots": {"np.nanmin"},    # the loss curve's lowest point
    "report.data": {"np.max"},        # a histogram's scale: the values are counted divided by their largest magnitude
}


def stats_sites(root: Path, allowed: dict[str, set[str]] | None = None) -> list[str]:
    """Calls outside the stats home that compute min/max/mean/std (numpy, as a function or a method, or
    pyarrow.compute), as 'module:line call', less the `allowed` ones (module without the package prefix ->
    call texts)."""
    allowed = NOT_STATS if allowed is None else allowed
    sites = []
    for name, path in modules(root).items():
        short = name.partition(".")[2]
        if short in STATS_HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            numpy_reduction = (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                               and func.value.id in ("np", "numpy") and called in NUMPY_REDUCTIONS)
            text = ast.unparse(func)
            if (called in STAT_CALLS or numpy_reduction) and text not in allowed.get(short, ()):
                sites.append(f"{name}:{node.lineno} {text}")
    return sites


def test_only_the_stats_home_computes_stats():
    assert stats_sites(PACKAGE) == []
    found = {(site.split(":")[0].partition(".")[2], site.split(" ", 1)[1]) for site in stats_sites(PACKAGE, {})}
    stale = [(module, call) for module, calls in NOT_STATS.items() for call in calls if (module, call) not in found]
    assert stale == [], "NOT_STATS lists calls the package no longer makes"


def test_a_stats_computation_outside_the_home_is_found(tmp_path):
    root = _package(tmp_path, {"tables/stats.py": "import numpy as np\n"
                                                  "def f(v):\n    return v.mean(axis=0), np.max(v)\n",
                               "a.py": "import numpy as np\ndef g(v):\n    return np.min(v, axis=0), v.std(0)\n",
                               "b.py": "import pyarrow.compute as pc\ndef h(c):\n    return pc.min_max(c)\n",
                               "c.py": "import numpy as np\ndef k(v, s):\n    return np.add.reduceat(v, s), v.min()\n",
                               "d.py": "import numpy as np\ndef m(v):\n    return np.mean(v)\n"})
    assert sorted(stats_sites(root, {"d": {"np.mean"}})) == ["pkg.a:3 np.min", "pkg.a:3 v.std", "pkg.b:3 pc.min_max",
                                                             "pkg.c:3 np.add.reduceat"]


# Every write makes a new file and renames it over its target (files.new_file, or formats.jsonl's
# replace_file/write_text/write_json on top of it), or writes inside a tree that staging.staged_output is building.
# The home of those primitives may write directly; anything else that writes a file is listed here with its reason,
# and the list must match the code exactly (a new direct write fails, so does an entry whose write has gone).
WRITE_HOME = {"files", "promote.staging", "promote.links", "promote.locks"}
DIRECT_WRITES = {
    "ops.rewrite.write_rows": "ParquetWriters opened on new_file names that an ExitStack holds open",
    "pi05.export.write_policy": "into a checkpoint or export folder that staged_output is building",
    "pi05.weights.save_weights": "into a checkpoint or export folder that staged_output is building",
    "pi05.metrics.Metrics.flush": "a run's metrics.jsonl, appended as it trains (the run folder is train's own output)",
    "report.plots.png": "matplotlib into an in-memory buffer, not a file",
    "report.plots.svg": "matplotlib into an in-memory buffer, not a file",
    "hub.placed_download": "moves huggingface_hub's bookkeeping folder inside a download's own output",
}


def _write_call(call: ast.Call) -> bool:
    """Whether `call` writes to the file system directly: open() for writing, Path.write_text/write_bytes,
    parquet writers, shutil copies and moves, os renames and links, safetensors/torch/numpy/matplotlib savers."""
    func = call.func
    text = ast.unparse(func)
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name == "open":
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")
    if isinstance(func, ast.Attribute) and name in {"write_text", "write_bytes", "symlink_to", "hardlink_to",
                                                   "touch", "rename"}:
        return ast.unparse(func.value) != "super()"    # an override's call to its base (click's formatter)
    if text.startswith("shutil.") and name in {"copy", "copy2", "copyfile", "copytree", "move"}:
        return True
    if text.startswith("os.") and name in {"replace", "rename", "link", "symlink"}:
        return True
    if name == "write_table":    # pyarrow.parquet.write_table(table, where); a ParquetWriter's own is not a new file
        return text.startswith(("pq.", "pyarrow."))
    return name in {"ParquetWriter", "save_file", "savefig"} or (
        name == "save" and text.startswith(("torch.", "np.", "numpy.")))


def calls_outside(root: Path, home: set[str], wanted):
    """(module's short name, call node, the tree's child -> parent map) for every call for which `wanted(call)` holds,
    in every module of the package at `root` but those of `home`."""
    for name, path in modules(root).items():
        short = name.partition(".")[2]
        if short in home:
            continue
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and wanted(node):
                yield short, node, parents


def direct_writes(root: Path) -> dict[str, int]:
    """'module.function' -> line of each direct write outside the write home that is not inside a
    `with new_file(...)`/`with staged_output(...)` block or a function given to replace_file."""
    found = {}
    for short, node, parents in calls_outside(root, WRITE_HOME, _write_call):
        where, up, safe = [], node, False
        while up in parents and not safe:
            up = parents[up]
            if isinstance(up, ast.With):
                safe = any(k in ast.unparse(i.context_expr)
                           for i in up.items for k in ("new_file", "staged_output"))
            elif isinstance(up, ast.Call):
                safe = "replace_file" in ast.unparse(up.func)
            elif isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                where.insert(0, up.name)
        if not safe:
            found.setdefault(".".join([short, *where]), node.lineno)
    return found


def test_every_write_makes_a_new_file_or_is_listed():
    assert sorted(direct_writes(PACKAGE)) == sorted(DIRECT_WRITES)


def test_a_direct_write_is_found(tmp_path):
    root = _package(tmp_path, {"a.py": "from pathlib import Path\n"
                                       "def f(p):\n    Path(p).write_text('x')\n",
                               "b.py": "from x import new_file\n"
                                       "def g(p):\n    with new_file(p) as tmp:\n        open(tmp, 'wb')\n",
                               "c.py": "import shutil\nclass C:\n    def h(self, a, b):\n        shutil.copy2(a, b)\n"})
    assert direct_writes(root) == {"a.f": 3, "c.C.h": 4}
