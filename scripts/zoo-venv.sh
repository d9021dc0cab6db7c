#!/usr/bin/env bash
# Make (once) a venv holding one lerobot release, for the writer zoo (tests/zoo/build.py).
#
#   scripts/zoo-venv.sh 0.4.4        # prints the venv's python path on its last line
#
# Venv location: ${LERODOC_ZOO_VENVS:-$HOME/.cache/lerodoc}/lerobot-VERSION.
# 0.6.1 is the reference venv of scripts/lerobot-venv.sh (Python 3.12) and is delegated to it.
# 0.3.x and 0.4.x need Python 3.11; torch is installed first and pinned (a CPU wheel), since an
# unpinned torch pulls a multi-GB CUDA build. Progress goes to stderr; stdout carries only the path.
set -euo pipefail

VERSION="${1:?usage: zoo-venv.sh VERSION (0.3.3, 0.4.0, 0.4.4, 0.6.1)}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="${LERODOC_ZOO_VENVS:-$HOME/.cache/lerodoc}"

log() { echo "zoo-venv[$VERSION]: $*" >&2; }

if [[ "$VERSION" == 0.6.1 ]]; then
    if [[ -n "${LERODOC_ZOO_VENVS:-}" && -z "${LERODOC_LEROBOT_VENV:-}" ]]; then
        export LERODOC_LEROBOT_VENV="$ROOT/lerobot-0.6.1"
    fi
    exec bash "$HERE/lerobot-venv.sh"
fi

TORCH_SPEC='torch==2.13.0'
case "$VERSION" in
    0.3.*) PINS=('numpy<2.3' 'pandas<3' 'av<16' 'huggingface-hub<1.0' 'diffusers<0.36') ;;
    0.4.*) PINS=('numpy<2.3' 'pandas<3' 'av<16') ;;
    *) log "ERROR: no recipe for lerobot $VERSION (known: 0.3.3, 0.4.0, 0.4.4, 0.6.1)"; exit 2 ;;
esac
SPEC="lerobot==$VERSION ${PINS[*]} $TORCH_SPEC"
VENV="$ROOT/lerobot-$VERSION"
PY="$VENV/bin/python"
MARKER="$VENV/.lerodoc-ready"

is_ready() {
    [[ -x "$PY" && -f "$MARKER" ]] && grep -qxF "$SPEC" "$MARKER"
}

if is_ready; then echo "$PY"; exit 0; fi

mkdir -p "$ROOT"
exec 9>"$VENV.lock"
command -v flock >/dev/null 2>&1 && flock 9   # one installer per venv at a time
if is_ready; then echo "$PY"; exit 0; fi

find_python311() {
    local cand
    if command -v pyenv >/dev/null 2>&1; then
        for cand in $(ls -d "$(pyenv root)"/versions/3.11* 2>/dev/null | sort -V -r); do
            "$cand/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null \
                && { echo "$cand/bin/python"; return 0; }
        done
    fi
    for cand in /root/.pyenv/versions/3.11*/bin/python "$(command -v python3.11 || true)"; do
        [[ -x "$cand" ]] && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null \
            && { echo "$cand"; return 0; }
    done
    if command -v uv >/dev/null 2>&1; then
        cand="$(uv python find 3.11 2>/dev/null || true)"
        [[ -n "$cand" ]] && { echo "$cand"; return 0; }
    fi
    return 1
}

BASE="$(find_python311)" || { log "ERROR: lerobot $VERSION needs Python 3.11 and none was found"; exit 2; }
[[ -x "$PY" ]] || { log "creating $VENV with $BASE"; "$BASE" -m venv "$VENV"; }
log "installing $TORCH_SPEC first (CPU wheel)"
"$PY" -m pip install -q "$TORCH_SPEC" >&2
log "installing lerobot==$VERSION with ${PINS[*]} (a few minutes)"
# lerobot 0.3.x/0.4.x require torch<2.8 or <2.11, which the registry serves only as multi-GB CUDA
# builds: install lerobot without its dependencies, then those dependencies that its dataset code
# needs, with torch held at the CPU wheel and torchvision matched to it (torchcodec left out:
# the zoo writers encode and decode with PyAV).
"$PY" -m pip install -q --no-deps "lerobot==$VERSION" >&2
mapfile -t DEPS < <("$PY" - <<'PYEOF'
import importlib.metadata as md
import re
skip = {"torch", "torchvision", "torchcodec", "wandb", "rerun-sdk", "pynput", "pyserial", "flask",
        "cmake", "gymnasium", "opencv-python-headless", "imageio"}
for req in md.requires("lerobot") or []:
    if "extra ==" in req:
        continue
    name = re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower()
    if name not in skip:
        print(req.split(";")[0].strip())
PYEOF
)
"$PY" -m pip install -q "${DEPS[@]}" "${PINS[@]}" "$TORCH_SPEC" torchvision >&2
# The registry's torchvision links CUDA libraries the CPU torch lacks: see zoo_torchvision_shim.py.
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp "$HERE/zoo_torchvision_shim.py" "$SITE/zoo_torchvision_shim.py"
echo "import zoo_torchvision_shim" >"$SITE/zoo_torchvision_shim.pth"
"$PY" - >&2 <<PYEOF || { log "ERROR: lerobot $VERSION installed but does not import"; exit 3; }
import importlib.metadata as md
import torchvision, lerobot.datasets.lerobot_dataset  # noqa: F401
assert md.version("lerobot") == "$VERSION", md.version("lerobot")
PYEOF
echo "$SPEC" >"$MARKER"
log "ready"
echo "$PY"
