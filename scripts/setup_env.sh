#!/usr/bin/env bash
# Create .venv (Python 3.11) with everything the demo and the tests need; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.neural_rom_stamp
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # torch is pinned to the CPU build (2.13.0) so CI never pulls a multi-GB CUDA wheel;
  # see README "Training on a GPU" for a CUDA trainer environment.
  .venv/bin/python -m pip install --disable-pip-version-check -q -e ".[dev]"
  echo "$want" > "$stamp"
fi
