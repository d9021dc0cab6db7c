"""Digest what every command writes and prints over the writer zoo, to prove that a refactor changed no behaviour.

    python3 scripts/zoo_hashes.py -o before.json [--tree DIR]    # DIR: a checkout of the commit to measure
    python3 scripts/zoo_hashes.py --compare before.json after.json

For each zoo member (tests/zoo), each command of `COMMANDS` runs in this process through `cli.main` (as a user
types it) into a fresh folder. Recorded: the exit code, the `--json` report (paths of this run's folders replaced
by placeholders), and a digest of every file the command wrote. A parquet file is digested by its schema and
values (its Arrow table), not its bytes, so that how rows are grouped inside the file does not count as a change
of behaviour; every other file by its bytes. `--compare` lists every key whose record differs and exits 1 if any.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (name, arguments): IN is the member's folder, OUT the command's output folder
COMMANDS = [
    ("info", ["info", "IN", "--json"]),
    ("validate", ["validate", "IN", "--videos", "--json"]),
    ("convert", ["convert", "IN", "-o", "OUT", "--json"]),
    ("convert_v21", ["convert", "IN", "-o", "OUT", "--to", "v2.1", "--json"]),
    ("merge", ["merge", "IN", "IN", "-o", "OUT", "--json"]),
    ("delete", ["delete", "IN", "-o", "OUT", "--episodes", "0", "--json"]),
    ("split", ["split", "IN", "-o", "OUT", "--into", "a=0.5,b=0.5", "--seed", "1", "--json"]),
    ("flatten", ["flatten", "IN", "-o", "OUT", "--json"]),
    ("quantiles", ["quantiles", "IN", "-o", "OUT", "--json"]),
    ("repair", ["repair", "IN", "-o", "OUT", "--json"]),
    ("report", ["report", "IN", "-o", "OUT/report.html", "--json"]),
]


def digest_file(path: Path) -> str:
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as exc:
            return f"unreadable parquet: {type(exc).__name__}"
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.combine_chunks())
        return "table:" + hashlib.sha256(sink.getvalue()).hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def digest_tree(root: Path) -> dict[str, str]:
    if root.is_file():
        return {root.name: digest_file(root)}
    return {str(p.relative_to(root)): digest_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def timeless(value):
    """The report without its timings (`seconds` at any depth) and lerodoc's version: what may differ between runs."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in ("seconds", "version")}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def run(args: list[str], tree: Path | None = None) -> tuple[int, str, str]:
    if tree is not None:
        # a fresh process: a page's embedded plots depend on state a long-lived process accumulates
        import os
        import subprocess
        env = {**os.environ, "PYTHONPATH": str(tree)}
        proc = subprocess.run([sys.executable, "-m", "lerodoc", *args], capture_output=True, text=True, env=env,
                              cwd=tree)   # `-m` puts the working folder first on sys.path: it must be the tree
        return proc.returncode, proc.stdout, proc.stderr
    from lerodoc import cli, render
    saved_argv, saved_level = sys.argv, render.level
    sys.argv = ["lerodoc", *args]
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.argv, render.level = saved_argv, saved_level
    return code, out.getvalue(), err.getvalue()


def measure(members: list, work: Path, tree: Path) -> dict:
    records = {}
    for member in members:
        for name, template in COMMANDS:
            out = work / member.name / name
            shutil.rmtree(out, ignore_errors=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            args = [str(member.root) if a == "IN" else a.replace("OUT", str(out)) for a in template]
            if name == "report":
                out.mkdir()
            code, stdout, stderr = run(args, tree if name == "report" else None)
            text = stdout.replace(str(out), "OUT").replace(str(member.root), "IN")
            try:
                report = json.loads(text) if text.strip() else None
            except json.JSONDecodeError:
                report = text
            report = timeless(report)
            records[f"{member.name}/{name}"] = {
                "exit": code, "json": report, "files": digest_tree(out) if out.exists() else {},
                "traceback": "Traceback" in stderr}
            shutil.rmtree(out, ignore_errors=True)
        print(f"{member.name}: done", file=sys.stderr)
    return records


def compare(before: dict, after: dict) -> list[str]:
    lines = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if a is None or b is None:
            lines.append(f"{key}: only in {'after' if a is None else 'before'}")
            continue
        for field in ("exit", "json", "traceback"):
            if a[field] != b[field]:
                lines.append(f"{key}: {field} differs")
        for rel in sorted(set(a["files"]) | set(b["files"])):
            if a["files"].get(rel) != b["files"].get(rel):
                lines.append(f"{key}: {rel} differs")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose lerodoc runs")
    parser.add_argument("--members", default="", help="comma-separated member names (default: all)")
    parser.add_argument("--compare", nargs=2, type=Path)
    args = parser.parse_args()
    if args.compare:
        lines = compare(*(json.loads(p.read_text())["records"] for p in args.compare))
        print("\n".join(lines) or "identical")
        return 1 if lines else 0
    sys.path.insert(0, str(REPO))
    from tests.zoo import members    # this checkout's zoo, so that both runs read the same paths
    sys.path.insert(0, str(args.tree.resolve()))
    import lerodoc
    assert Path(lerodoc.__file__).resolve().is_relative_to(args.tree.resolve()), lerodoc.__file__
    chosen = [m for m in members() if not args.members or m.name in args.members.split(",")]
    with tempfile.TemporaryDirectory(prefix="zoo-hashes-") as work:
        records = measure(chosen, Path(work), args.tree.resolve())
    args.out.write_text(json.dumps({"tree": str(args.tree), "records": records}, indent=1, sort_keys=True))
    print(f"{len(records)} records -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
