#!/usr/bin/env bash
# The wheels that bench/train_vs_lerobot carries to the device, into .whl/ (git-ignored): lerobot 0.6.1's pi05
# beyond the device image's own packages (Python 3.12, torch 2.11, transformers 5.17, tokenizers 0.23.2, ...).
# transformers 5.5.4 refuses tokenizers > 0.23.0 at import, hence tokenizers 0.22.2. No `datasets`: without it
# lerobot imports neither datasets nor PyAV for the policy. About 16 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  lerobot==0.6.1 transformers==5.5.4 tokenizers==0.22.2 draccus==0.11.6 mergedeep==1.3.4 gymnasium==1.4.0 \
  farama-notifications==0.0.6
