"""The extension manifest, checked against Blender's own extension tooling, which the PyPI
bpy ships (``addons_core/bl_pkg/cli/blender_ext.py``): its strict manifest validator and its
path pattern matcher. The zips built from it: tests/test_build_wheels.py.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "blender_manifest.toml"


def load_script(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses need their module registered
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def manifest() -> dict:
    with open(MANIFEST, "rb") as fh:
        return tomllib.load(fh)


@pytest.fixture(scope="module")
def blender_ext_path() -> Path:
    origin = Path(importlib.util.find_spec("bpy").origin).parent
    found = sorted(origin.glob("*/scripts/addons_core/bl_pkg/cli/blender_ext.py"))
    assert found, f"the PyPI bpy in {origin} ships no blender_ext.py"
    return found[-1]


@pytest.fixture(scope="module")
def blender_ext(blender_ext_path):
    return load_script("blender_ext", blender_ext_path)


def terse_ok(text: str) -> bool:
    """Blender's rule for taglines and permission reasons."""
    return (
        0 < len(text) <= 64 and text == text.strip() and (text[-1].isalnum() or text[-1] in ")]}")
    )


def test_manifest_has_the_required_keys_and_values(manifest):
    assert manifest["schema_version"] == "1.0.0"
    assert manifest["id"] == "neural_rom"
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["version"])
    assert manifest["name"] == "Neural ROM"
    assert terse_ok(manifest["tagline"]), manifest["tagline"]
    assert manifest["maintainer"].strip()
    assert manifest["type"] == "add-on"
    assert manifest["blender_version_min"] == "4.2.0"
    # Wheels for Python 3.11 (Blender 4.2 to 5.0) and 3.13 (5.1 to 5.3): 5.3 is the newest.
    assert manifest["blender_version_max"] == "5.4.0"
    assert manifest["platforms"] == ["linux-x64", "windows-x64", "macos-arm64", "macos-x64"]
    assert manifest["wheels"] and all(
        re.fullmatch(r"\./wheels/[^/]+\.whl", w) for w in manifest["wheels"]
    )
    assert manifest["license"] == ["SPDX:GPL-3.0-or-later"]
    permissions = manifest["permissions"]
    assert isinstance(permissions, dict) and set(permissions) == {"files"}
    for reason in permissions.values():
        assert terse_ok(reason) and not reason.endswith("."), reason
    excludes = manifest["build"]["paths_exclude_pattern"]
    for pattern in (
        "/tests/",
        "/bench/",
        "/docs/",
        "/README.md",
        "/.venv/",
        "/.ci/",
        "/scripts/",
        "/farm/",
        "/dist/",
        "/wheels/",
        "__pycache__/",
        "*.pyc",
        "/.git*",
    ):
        assert pattern in excludes


def test_manifest_version_matches_the_python_package(manifest):
    with open(ROOT / "pyproject.toml", "rb") as fh:
        assert tomllib.load(fh)["project"]["version"] == manifest["version"]


def test_manifest_passes_blenders_strict_validation(manifest, blender_ext):
    result = blender_ext.pkg_manifest_from_dict_and_validate_all_errros(
        manifest, from_repo=False, strict=True
    )
    assert not isinstance(result, list), result
    assert (result.id, result.version, result.type) == ("neural_rom", manifest["version"], "add-on")
    build = blender_ext.PkgManifest_Build.from_dict_all_errors(manifest["build"], extra_paths=[])
    assert not isinstance(build, list), build


def test_the_validator_catches_what_the_test_checks(blender_ext, manifest):
    # The rules this file relies on are Blender's: a bad tagline and reason are refused.
    bad = dict(manifest, tagline="Ends with a dot.", permissions={"files": "x" * 65})
    errors = blender_ext.pkg_manifest_from_dict_and_validate_all_errros(
        bad, from_repo=False, strict=True
    )
    assert isinstance(errors, list) and len(errors) == 2


# What runs in Blender and in the job worker: the only top-level entries that ship.
RUNTIME = {"__init__.py", "worker.py", "blender_manifest.toml", "addon/", "core/", "training/",
           "ui/"}  # fmt: skip


def test_only_runtime_files_ship(blender_ext, manifest):
    # Blender's own matcher over this checkout's top level: docs, tests, README, caches and
    # anything new stay out of the zip unless they are listed in RUNTIME above.
    patterns = blender_ext.PathPatternMatch(manifest["build"]["paths_exclude_pattern"])
    entries = [p.name + "/" if p.is_dir() else p.name for p in ROOT.iterdir()]
    assert {"docs/", "tests/", "README.md", "scripts/"} <= set(entries)
    for entry in entries:
        assert patterns.test_path(entry) == (entry not in RUNTIME), entry
    for inside in ("core/__pycache__/", "core/x.pyc", "addon/.swp", "core/jobs.py"):
        assert patterns.test_path(inside) == (inside != "core/jobs.py"), inside
