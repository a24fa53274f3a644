"""The built Linux zip, with its real wheels, installed into this Python's PyPI bpy by
Blender's own installer (scripts/check_install.py: ``extensions.package_install_files``,
as Install from Disk), enabled, and taken through tetrahedralize, bake, train (linear) and
simulate with the installed copy and only its bundled wheels.

On the Python 3.11 line that is Blender 4.5 (numpy 1), on the 3.13 line Blender 5.2 (numpy
2). The wheels are downloaded once (pip) into the checkout's ``wheels/`` (about 80 MB for
Linux, both Pythons), as ``scripts/build_extension.py`` does.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = "linux-x64"
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


def load_script(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bx():
    return load_script("build_extension", ROOT / "scripts" / "build_extension.py")


def linux_only(source: Path, bx) -> None:
    """Make the copy's manifest build the Linux zip only (the wheels of the others left
    out, so nothing else is downloaded): the zip is the one the full build writes."""
    path = source / bx.MANIFEST
    text = path.read_text()
    manifest = bx.read_manifest(source)
    for name in set(bx.wheel_names(manifest)) - set(bx.platform_wheels(manifest, PLATFORM)):
        text = text.replace(f'  "./wheels/{name}",\n', "")
    text, n = re.subn(r"(?m)^platforms = \[.*\]$", f'platforms = ["{PLATFORM}"]', text)
    assert n == 1
    path.write_text(text)
    assert bx.read_manifest(source)["platforms"] == [PLATFORM]


@pytest.fixture(scope="module")
def linux_zip(tmp_path_factory, bx) -> Path:
    source = tmp_path_factory.mktemp("checkout") / "neural_rom"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "wheels", "dist", "out", "build", "__pycache__", ".*_cache"
        ),
    )
    (ROOT / "wheels").mkdir(exist_ok=True)
    (source / "wheels").symlink_to(ROOT / "wheels")  # the download cache of the checkout
    linux_only(source, bx)
    (path,) = bx.build(source, tmp_path_factory.mktemp("dist"))
    assert path.name.endswith("-linux_x64.zip")
    return path


@pytest.fixture(scope="module")
def installed(linux_zip, tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("install")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_install.py"), str(linux_zip),
         "--workdir", str(work)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("check_install: ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(lines[-1].removeprefix("check_install: "))
    report["returncode"] = proc.returncode
    report["output"] = proc.stdout[-3000:] + proc.stderr[-3000:]
    return report


def test_blender_installs_the_zip_with_the_wheels_of_its_own_python_and_enables_it(
    installed, bx, linux_zip
):
    import bpy

    assert installed["bpy"].split()[0] == bpy.app.version_string.split()[0]
    assert installed["install"] == ["FINISHED"] and installed["enabled"], installed["output"]
    manifest = bx.read_manifest(ROOT)
    want = sorted(
        "{}-{}.dist-info".format(*bx.parse_wheel_filename(n)[:2])
        for n in bx.platform_wheels(manifest, PLATFORM, PYTHON)
    )
    assert installed["wheels_installed"] == want  # this Python's, not the other line's
    assert installed["scipy"] == bx.pins(manifest, PYTHON)["scipy"]
    assert installed["scipy_from_wheels"]  # the bundled scipy, not this venv's
    # core/_moved.py's old names, keyed on the installed package's own name (bl_ext...)
    assert installed["old_paths_same"] and installed["old_paths"] > 30


def test_the_installed_extension_tetrahedralizes_bakes_trains_and_simulates(installed):
    assert installed["exit_codes"] == [0, 0, 0, 0], installed["output"]
    assert installed["returncode"] == 0, installed["output"]
    assert installed["tets"] > 50
    assert installed["bakes"] == [[7, "complete"], [7, "complete"]]
    assert installed["k"] == 3
    assert installed["simulated_frames"] == 8 and installed["finite"]
    # The ball falls and deforms under the model: it moves centimetres, not nothing or metres.
    assert 0.01 < installed["max_motion_m"] < 1.0, installed["max_motion_m"]
