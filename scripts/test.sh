#!/usr/bin/env bash
# Install lerodoc with its test dependencies, make the lerobot 0.6.1 reference venv, run the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# torch first, pinned: this machine kind has its CPU build on disk (an unpinned torch pulls a CUDA build)
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e '.[dev,train,hub]'
if ! command -v ffmpeg >/dev/null 2>&1; then
  # lerobot's torchcodec backend needs system FFmpeg; without it the oracle tests use PyAV only.
  (apt-get install -y -q ffmpeg >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q ffmpeg >/dev/null 2>&1)) \
    || echo "ffmpeg not installed: lerobot checks will use the pyav backend only" >&2
fi
if ! command -v chromium >/dev/null 2>&1; then
  # tests/test_report.py renders a report in headless Chromium (under CI=true it fails without it).
  (apt-get install -y -q chromium >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1)) \
    || echo "chromium not installed: tests/test_report.py's browser test will skip (fail under CI=true)" >&2
fi
bash scripts/lerobot-venv.sh >/dev/null
# one pytest worker per CPU, at most 4 (each keeps its own lerobot oracle interpreter), a test module per worker
# (--dist loadfile: module-scoped fixtures are built once); LERODOC_TEST_WORKERS=0 runs in this process.
WORKERS="${LERODOC_TEST_WORKERS:-$(python3 -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}"
python3 -m pytest -q -n "$WORKERS" --dist loadfile "$@"
