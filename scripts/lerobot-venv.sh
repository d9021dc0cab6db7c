#!/usr/bin/env bash
# Make (once) the lerobot 0.6.1 reference venv that the conformance tests use as an oracle.
#
#   scripts/lerobot-venv.sh            # prints the venv's python path on its last line
#
# Venv location: ${LERODOC_LEROBOT_VENV:-$HOME/.cache/lerodoc/lerobot-0.6.1}.
# Needs Python 3.12 (pyenv, python3.12 on PATH, or uv) and system ffmpeg libraries for torchcodec.
# Progress goes to stderr; stdout carries only the python path.
set -euo pipefail

LEROBOT_SPEC='lerobot[dataset,pi]==0.6.1'   # pi: transformers, for the PI05 equivalence test
VENV="${LERODOC_LEROBOT_VENV:-$HOME/.cache/lerodoc/lerobot-0.6.1}"
PY="$VENV/bin/python"
MARKER="$VENV/.lerodoc-ready"

log() { echo "lerobot-venv: $*" >&2; }

is_ready() {
    [[ -x "$PY" && -f "$MARKER" ]] && grep -qxF "$LEROBOT_SPEC" "$MARKER" && return 0
    # A venv made by hand (no marker yet): accept it if lerobot 0.6.1 imports.
    [[ -x "$PY" ]] && "$PY" - >/dev/null 2>&1 <<'EOF' || return 1
import importlib.metadata as md, lerobot.datasets.lerobot_dataset, transformers  # noqa: F401
assert md.version("lerobot") == "0.6.1"
EOF
    echo "$LEROBOT_SPEC" >"$MARKER"
}

is_py312() { [[ -n "$1" ]] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }

find_python312() {
    local cand
    if command -v pyenv >/dev/null 2>&1; then
        for cand in $(ls -d "$(pyenv root)"/versions/3.12* 2>/dev/null | sort -V -r); do
            is_py312 "$cand/bin/python" && { echo "$cand/bin/python"; return 0; }
        done
    fi
    cand="$(command -v python3.12 || true)"
    is_py312 "$cand" && { echo "$cand"; return 0; }
    if command -v uv >/dev/null 2>&1; then
        cand="$(uv python find 3.12 2>/dev/null || true)"
        is_py312 "$cand" && { echo "$cand"; return 0; }
    fi
    return 1
}

if is_ready; then echo "$PY"; exit 0; fi

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
command -v flock >/dev/null 2>&1 && flock 9   # one installer at a time (e.g. pytest-xdist)
if is_ready; then echo "$PY"; exit 0; fi

BASE="$(find_python312)" || {
    log "ERROR: no Python 3.12 found (tried \$(pyenv root)/versions/3.12*, python3.12 on PATH, 'uv python find 3.12')."
    log "lerobot 0.6.1 requires Python 3.12; install one (e.g. 'pyenv install 3.12' or 'uv python install 3.12')."
    exit 2
}
if [[ ! -x "$PY" ]]; then      # an existing venv (e.g. made for an older spec) is topped up, not rebuilt
    log "creating $VENV with $BASE"
    "$BASE" -m venv "$VENV"
fi
log "installing $LEROBOT_SPEC (a few minutes: torch, torchcodec, av, datasets, transformers)"
"$PY" -m pip install -q "$LEROBOT_SPEC" >&2
is_ready || { log "ERROR: $LEROBOT_SPEC installed but 'import lerobot.datasets.lerobot_dataset' fails in $VENV"; exit 3; }
log "ready"
echo "$PY"
