#!/usr/bin/env bash
# Set up .venv if needed and run the demo: out/demo.blend and out/demo.png.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python scripts/demo.py "$@"
