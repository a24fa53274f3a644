"""The two development lines (README "Development"): pyproject's environment markers give
Python 3.11 numpy 1 + bpy 4.5 + torch and Python 3.13 numpy 2 + bpy 5.2 without torch, and
scripts/env.sh (sourced by setup_env.sh, test.sh, demo.sh) picks the interpreter and venv
that ``PYTHON`` names."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent


def requirements_for(python: str) -> dict[str, SpecifierSet]:
    """Name -> specifier of the package and its dev extra on Python ``python`` (Linux)."""
    with open(ROOT / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)["project"]
    env = {"python_version": python, "python_full_version": python + ".0",
           "sys_platform": "linux", "platform_system": "Linux", "extra": "dev"}  # fmt: skip
    found: dict[str, SpecifierSet] = {}
    for line in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            found[req.name] = found.get(req.name, SpecifierSet()) & req.specifier
    return found


def test_each_python_line_gets_its_numpy_bpy_and_torch():
    old, new = requirements_for("3.11"), requirements_for("3.13")
    assert "1.26.4" in old["numpy"] and "2.2.0" not in old["numpy"]
    assert "2.5.5" in new["numpy"] and "1.26.4" not in new["numpy"]
    assert "4.5.15" in old["bpy"] and "5.2.3" not in old["bpy"]
    assert "5.2.3" in new["bpy"] and "4.5.15" not in new["bpy"]
    assert "torch" in old and "torch" not in new  # no CPU torch for 3.13 here
    assert {"scipy", "tetgen", "meshio", "pyamg", "pytest"} <= set(old) & set(new)


def env_sh(python: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", "-c", 'source scripts/env.sh; echo "$PY|$VENV"'],
        cwd=ROOT, env={**os.environ, "PYTHON": python, **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_env_sh_picks_the_venv_of_the_python_asked_for(tmp_path):
    tag = f"{sys.version_info[0]}{sys.version_info[1]}"
    venv = ".venv" if tag == "311" else f".venv{tag}"
    proc = env_sh(sys.executable)
    assert proc.stdout.strip() == f"{sys.executable}|{venv}", proc.stderr
    # pythonX.Y off PATH (a CI shell without pyenv's shims): found in pyenv's versions.
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = tmp_path / "versions" / f"{version}.9" / "bin" / f"python{version}"
    found.parent.mkdir(parents=True)
    found.symlink_to(sys.executable)
    (tmp_path / "empty").mkdir()
    proc = env_sh(f"python{version}", PATH=str(tmp_path / "empty"), PYENV_ROOT=str(tmp_path))
    assert proc.stdout.strip() == f"{found}|{venv}", proc.stderr


@pytest.mark.parametrize("python", ["python3.99", "/no/such/python3"])
def test_env_sh_without_that_python_says_what_to_set(python, tmp_path):
    proc = env_sh(python, PYENV_ROOT=str(tmp_path))
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"error: no Python '{python}': install it" in proc.stderr
    assert "PYTHON=python3.13 for Blender 5.x's line" in proc.stderr
