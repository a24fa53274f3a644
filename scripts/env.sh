# Sourced by setup_env.sh, test.sh and demo.sh: picks the Python line and its venv.
#   default                 Python 3.11 (bpy 4.5, numpy 1.x, torch)   -> .venv
#   PYTHON=python3.13       Python 3.13 (bpy 5.2, numpy 2, no torch)  -> .venv313
# Any other PYTHON gets .venv<major><minor> (.venv for 3.11). A pythonX.Y that does not run
# (pyenv's shim with another version active, or not on PATH) is taken from pyenv's versions.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
fi
if ! "$PY" -c "" >/dev/null 2>&1; then
  want_version=${PY##*python}
  for found in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want_version".*/bin/python"$want_version"; do
    if "$found" -c "" >/dev/null 2>&1; then PY=$found; fi
  done
fi
if ! "$PY" -c "" >/dev/null 2>&1; then
  echo "error: no Python '$PY': install it (the default line is python3.11; PYTHON=python3.13 for Blender 5.x's line) or set PYTHON to a Python 3.11 or 3.13" >&2
  exit 1
fi
PY_TAG=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
if [ "$PY_TAG" = 311 ]; then VENV=.venv; else VENV=.venv$PY_TAG; fi
