#!/usr/bin/env bash
# Create the venv of a Python line with everything the demo and the tests need; idempotent.
#   bash scripts/setup_env.sh                      .venv: Python 3.11, bpy 4.5, numpy 1.x, torch
#   PYTHON=python3.13 bash scripts/setup_env.sh    .venv313: Python 3.13, bpy 5.2, numpy 2
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
stamp=$VENV/.neural_rom_stamp
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # torch is pinned to the CPU build (2.13.0) so CI never pulls a multi-GB CUDA wheel; there
  # is none for Python 3.13, whose line trains learned methods in a 3.11 interpreter
  # (NEURAL_ROM_PYTHON). See README "Training on a GPU" for a CUDA trainer environment.
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e ".[dev]"
  echo "$want" > "$stamp"
fi
