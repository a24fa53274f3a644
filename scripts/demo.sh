#!/usr/bin/env bash
# Set up the venv if needed and run the demo: out/demo.blend and out/demo.png
# (PYTHON=python3.13: Blender 5.x's line in .venv313; see scripts/env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
source scripts/env.sh
exec "$VENV/bin/python" scripts/demo.py "$@"
