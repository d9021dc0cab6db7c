#!/usr/bin/env bash
# Make (once) the venvs of the validators bench/peers.py compares lerodoc with, each in its own venv,
# from PyPI at pinned versions, so `python3 -m bench.peers` re-runs the comparison on any machine.
#
#   scripts/peer-venvs.sh            # prints one line per peer: NAME VENV
#
# Venvs: ${LERODOC_PEER_VENVS:-$HOME/.cache/lerodoc/peers}/{robovet,trajlens,lerobot-doctor}; a venv whose
# marker names the same spec is kept. Progress goes to stderr.
set -euo pipefail

ROOT="${LERODOC_PEER_VENVS:-$HOME/.cache/lerodoc/peers}"
PYTHON="${PYTHON:-python3}"
declare -A SPECS=(
    [robovet]='robovet[video]==0.2.2'      # video: PyAV, for its container checks
    [trajlens]='trajlens==0.4.0'
    [lerobot-doctor]='lerobot-doctor==0.2.0'
)
log() { echo "peer-venvs: $*" >&2; }

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { log "$PYTHON is older than 3.11 (trajlens needs 3.11)"; exit 1; }
mkdir -p "$ROOT"
for name in robovet trajlens lerobot-doctor; do
    spec="${SPECS[$name]}"
    venv="$ROOT/$name"
    marker="$venv/.lerodoc-ready"
    if [[ -x "$venv/bin/$name" && -f "$marker" ]] && grep -qxF "$spec" "$marker"; then
        echo "$name $venv"
        continue
    fi
    log "making $venv ($spec)"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "$spec" >&2
    "$venv/bin/$name" --help >/dev/null   # the entry point runs
    echo "$spec" >"$marker"
    echo "$name $venv"
done
