"""The extension manifest and the installable zip (scripts/build_extension.py).

Checked against Blender's own extension tooling, which the PyPI bpy ships
(``addons_core/bl_pkg/cli/blender_ext.py``): its strict manifest validator, its path
pattern matcher and its ``build`` command.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tomllib
import zipfile
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
def build_script():
    return load_script("build_extension", ROOT / "scripts" / "build_extension.py")


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
    assert manifest["license"] == ["SPDX:GPL-3.0-or-later"]
    permissions = manifest["permissions"]
    assert isinstance(permissions, dict) and set(permissions) == {"files"}
    for reason in permissions.values():
        assert terse_ok(reason) and not reason.endswith("."), reason
    excludes = manifest["build"]["paths_exclude_pattern"]
    for pattern in (
        "/tests/",
        "/bench/",
        "/.venv/",
        "/.ci/",
        "/scripts/",
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


PATHS = [
    "__init__.py", "worker.py", "core/", "core/jobs.py", "core/__pycache__/", "core/x.pyc",
    "tests/", "tests/test_jobs.py", "core/tests/", "bench/", ".venv/", ".ci/", ".git/",
    ".gitignore", "scripts/", "dist/", "build/", "out/", "core/out/", "neural_rom.egg-info/",
    "pyproject.toml", "core/pyproject.toml", "x.zip", "core/x.zip", "README.md", "a/.hidden",
    "training/", "training/models.py", "docs/a.pyc", "a/b/c/__pycache__/",
]  # fmt: skip


@pytest.mark.parametrize(
    "patterns",
    [
        None,  # the manifest's own list
        ["**/deep/*.txt", "/a/**/z", "x?.py", "[ab].md", "!keep.pyc", "*.pyc", "data/**"],
    ],
)
def test_path_patterns_match_like_blenders(patterns, manifest, build_script, blender_ext):
    patterns = patterns or manifest["build"]["paths_exclude_pattern"]
    ours = build_script.PathPatterns(patterns)
    theirs = blender_ext.PathPatternMatch(patterns)
    extra = ["x1.py", "xy.py", "x12.py", "a.md", "c.md", "keep.pyc", "k/keep.pyc", "data/", "data/q",
             "s/deep/t.txt", "deep/t.txt", "a/z", "a/b/z", "b/a/z", "d/data/"]  # fmt: skip
    for path in PATHS + extra:
        assert ours.excluded(path) == theirs.test_path(path), path


def test_build_writes_the_zip_blender_would(tmp_path, manifest, build_script):
    out = build_script.build(ROOT, output_dir=tmp_path)
    assert out == tmp_path / f"neural_rom-{manifest['version']}.zip"
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        assert zf.testzip() is None
        assert names[0] == "blender_manifest.toml"
        assert tomllib.loads(zf.read("blender_manifest.toml").decode()) == manifest
        assert zf.read("core/jobs.py") == (ROOT / "core" / "jobs.py").read_bytes()
    for required in ("__init__.py", "worker.py", "core/jobs.py", "core/errors.py", "addon/jobs.py",
                     "addon/cli.py", "addon/registration.py", "operators/__init__.py", "panels/__init__.py"):  # fmt: skip
        assert required in names
    for name in names:
        top = name.split("/")[0]
        assert top not in {
            "tests",
            "bench",
            "scripts",
            "dist",
            ".venv",
            ".ci",
            ".git",
            "build",
            "out",
        }, name
        assert "__pycache__" not in name and not name.endswith(".pyc"), name
        assert not any(part.startswith(".") for part in name.split("/")), name
        assert not name.endswith(".egg-info") and ".egg-info/" not in name, name


def test_build_lists_the_same_files_as_blenders_builder(tmp_path, build_script, blender_ext_path):
    ours = build_script.build(ROOT, output=tmp_path / "ours.zip")
    proc = subprocess.run(
        [
            sys.executable,
            str(blender_ext_path),
            "build",
            "--source-dir",
            str(ROOT),
            "--output-filepath",
            str(tmp_path / "blender.zip"),
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with zipfile.ZipFile(ours) as a, zipfile.ZipFile(tmp_path / "blender.zip") as b:
        assert sorted(a.namelist()) == sorted(b.namelist())


def test_build_command_line(tmp_path, build_script, capsys):
    out = tmp_path / "x.zip"
    assert build_script.main(["--output", str(out), "--list"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "blender_manifest.toml" and printed[-1].startswith(f"created: {out}")


def test_the_built_extension_runs_a_job_from_its_install_folder(tmp_path, build_script):
    # Installed, the package folder has another name and no tests, scripts or .venv.
    out = build_script.build(ROOT, output=tmp_path / "ext.zip")
    folder = tmp_path / "extensions" / "user_default" / "neural_rom"
    with zipfile.ZipFile(out) as zf:
        zf.extractall(folder)
    spec = tmp_path / "job.spec.json"
    spec.write_text(json.dumps({"kind": "selftest", "steps": 3, "sleep": 0}))
    proc = subprocess.run(
        [sys.executable, str(folder / "worker.py"), str(spec)],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout.splitlines()[-1])
    assert done["event"] == "done" and done["result"] == {"committed": 3, "steps": 3}
    assert f"package={folder}" in proc.stderr
