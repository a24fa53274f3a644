"""Platform zips with bundled wheels (scripts/build_extension.py --wheels / --wheel-dir).

No network: the wheels are tiny, valid fake wheels made here with the file names PyPI's
would have, and pip is a fake script. Checked against Blender's own extension tooling from
the PyPI bpy: its strict manifest validator and ``validate`` command, its
``build --split-platforms``, its wheel-platform mapping and the wheel installer Blender runs
when an extension is installed (``_bpy_internal/extensions/wheel_manager.py``).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from neural_rom.core import jobs

ROOT = Path(__file__).resolve().parent.parent


def load_script(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses need their module registered
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bx():
    return load_script("build_extension", ROOT / "scripts" / "build_extension.py")


@pytest.fixture(scope="module")
def bpy_scripts() -> Path:
    origin = Path(importlib.util.find_spec("bpy").origin).parent
    found = sorted(origin.glob("*/scripts"))
    assert found, f"the PyPI bpy in {origin} ships no scripts folder"
    return found[-1]


@pytest.fixture(scope="module")
def blender_ext_path(bpy_scripts) -> Path:
    return bpy_scripts / "addons_core" / "bl_pkg" / "cli" / "blender_ext.py"


@pytest.fixture(scope="module")
def blender_ext(blender_ext_path):
    return load_script("blender_ext", blender_ext_path)


# ---------------------------------------------------------------------------------------
# Fake wheels
# ---------------------------------------------------------------------------------------

# The platform tags PyPI's scipy/tetgen cp311 wheels carry, one per Blender platform.
BINARY_TAGS = {
    "linux-x64": "manylinux_2_17_x86_64.manylinux2014_x86_64",
    "windows-x64": "win_amd64",
    "macos-arm64": "macosx_12_0_arm64",
    "macos-x64": "macosx_10_13_x86_64",
}
BINARY = {"scipy", "tetgen"}
# Runtime requirements as the real wheels state them (abridged).
REQUIRES = {
    "scipy": ["numpy<2.5,>=1.23.5", 'pytest>=8.0.0; extra == "test"'],
    "tetgen": ["numpy", 'pyvista; extra == "extras"'],
    "meshio": ["numpy >=1.20.0", "rich", 'importlib-metadata ; python_version < "3.8"'],
    "rich": ["markdown-it-py (>=2.2.0)", "pygments (>=2.13.0,<3.0.0)"],
    "markdown-it-py": ["mdurl~=0.1"],
}


def module_name(dist: str) -> str:
    # "nrfake_" keeps a fake wheel from shadowing a real package in a child process.
    return "nrfake_" + dist.replace("-", "_").lower()


def make_wheel(folder: Path, dist: str, version: str, tags: str, requires=None) -> Path:
    """A small, valid wheel: one module, METADATA, WHEEL and a RECORD with hashes."""
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    python, abi, platform = tags.split("-")
    files = {
        f"{module_name(dist)}/__init__.py": f"VERSION = {version!r}\nTAGS = {tags!r}\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {dist}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in REQUIRES.get(dist, []) if requires is None)
        + "".join(f"Requires-Dist: {r}\n" for r in (requires or [])),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        f"Root-Is-Purelib: {'true' if platform == 'any' else 'false'}\n"
        + "".join(f"Tag: {python}-{abi}-{p}\n" for p in platform.split(".")),
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}-{version}-{tags}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def fake_wheel_dir(folder: Path, pins: dict[str, str]) -> Path:
    """wheels/<platform>/ binary wheels, wheels/any/ pure ones, as --wheels lays them out;
    plus decoys that must never be bundled."""
    for dist, version in pins.items():
        if dist in BINARY:
            for platform, tag in BINARY_TAGS.items():
                make_wheel(folder / platform, dist, version, f"cp311-cp311-{tag}")
        else:
            make_wheel(folder / "any", dist, version, "py3-none-any")
    make_wheel(folder / "windows-x64", "scipy", "1.0.0", "cp311-cp311-win_amd64")  # stale
    make_wheel(folder / "windows-x64", "scipy", pins["scipy"], "cp312-cp312-win_amd64")
    make_wheel(folder / "any", "numpy", "1.26.4", "py3-none-any")  # Blender ships numpy
    make_wheel(folder / "linux-x64", "tetgen", pins["tetgen"], "cp311-cp311-win_amd64")
    return folder


def expected_wheels(bx, platform: str) -> list[str]:
    names = []
    for dist, version in bx.WHEEL_PINS.items():
        tags = f"cp311-cp311-{BINARY_TAGS[platform]}" if dist in BINARY else "py3-none-any"
        names.append(f"{dist.replace('-', '_')}-{version}-{tags}.whl")
    return sorted(names)


@pytest.fixture(scope="module")
def wheel_dir(tmp_path_factory, bx) -> Path:
    return fake_wheel_dir(tmp_path_factory.mktemp("wheels"), bx.WHEEL_PINS)


@pytest.fixture(scope="module")
def plain_zip(tmp_path_factory, bx) -> Path:
    return bx.build(ROOT, output=tmp_path_factory.mktemp("plain") / "plain.zip")


@pytest.fixture(scope="module")
def platform_zips(tmp_path_factory, bx, wheel_dir) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    zips = bx.build_platforms(ROOT, wheel_dir, output_dir=out)
    return dict(zip(bx.PLATFORMS, zips, strict=True))


def extracted_source(plain_zip: Path, folder: Path) -> Path:
    """A source tree with only what the plain zip holds (small, fast to build)."""
    with zipfile.ZipFile(plain_zip) as zf:
        zf.extractall(folder)
    return folder


# ---------------------------------------------------------------------------------------
# Pins and platforms
# ---------------------------------------------------------------------------------------


def test_pins_cover_what_core_imports_and_leave_numpy_to_blender(bx):
    pins = {bx.normalize_name(n) for n in bx.WHEEL_PINS}
    assert {"scipy", "tetgen", "meshio", "rich"} <= pins and "numpy" not in pins
    assert set(bx.PLATFORMS) == {"linux-x64", "windows-x64", "macos-arm64", "macos-x64"}
    for version in bx.WHEEL_PINS.values():
        assert version[0].isdigit() and "*" not in version and "," not in version
    assert bx.PYTHON_VERSION == "3.11" and bx.BLENDER_VERSION_MAX == "5.1.0"


def test_wheel_platform_tags_map_to_blender_platforms_as_blender_maps_them(bx, blender_ext):
    tags = [
        "win_amd64", "win32", "manylinux_2_17_x86_64.manylinux2014_x86_64",
        "manylinux_2_27_x86_64.manylinux_2_28_x86_64", "manylinux2014_aarch64",
        "musllinux_1_2_x86_64", "macosx_12_0_arm64", "macosx_10_13_x86_64",
        "macosx_10_9_universal2", "linux_x86_64", "win_arm64",
    ]  # fmt: skip
    for tag in tags:
        ours = bx.blender_platforms_of_wheel_tag(tag)
        assert ours == blender_ext.blender_platforms_from_wheel_platform(tag), tag
    for platform, pip_tags in bx.PLATFORMS.items():  # every tag pip is given serves it
        for tag in pip_tags:
            assert bx.blender_platforms_of_wheel_tag(tag) == [platform], tag
    assert bx.blender_platforms_of_wheel_tag("any") == list(bx.PLATFORMS)


def test_wheel_fits_checks_platform_and_python(bx):
    assert bx.wheel_fits("scipy-1.15.3-cp311-cp311-win_amd64.whl", "windows-x64")
    assert not bx.wheel_fits("scipy-1.15.3-cp311-cp311-win_amd64.whl", "linux-x64")
    assert not bx.wheel_fits("scipy-1.15.3-cp312-cp312-win_amd64.whl", "windows-x64")
    assert not bx.wheel_fits("scipy-1.15.3-cp310-cp310-win_amd64.whl", "windows-x64")
    assert bx.wheel_fits("x-1.0-cp38-abi3-win_amd64.whl", "windows-x64")  # stable ABI
    assert not bx.wheel_fits("x-1.0-cp312-abi3-win_amd64.whl", "windows-x64")
    assert bx.wheel_fits("rich-15.0.0-py3-none-any.whl", "macos-arm64")
    assert bx.wheel_fits("six-1.16.0-py2.py3-none-any.whl", "linux-x64")
    assert not bx.wheel_fits("old-1.0-py2-none-any.whl", "linux-x64")
    assert bx.wheel_fits("x-1.0-cp311-cp311-macosx_10_9_universal2.whl", "macos-arm64")
    assert bx.parse_wheel_filename("Markdown_It_Py-4.3.0-1-py3-none-any.whl") == (
        "markdown_it_py", "4.3.0", "py3", "none", "any"
    )  # fmt: skip
    with pytest.raises(ValueError, match="not a wheel file name"):
        bx.parse_wheel_filename("scipy-1.15.3.whl")


# ---------------------------------------------------------------------------------------
# The platform zips
# ---------------------------------------------------------------------------------------


def test_each_platform_zip_holds_exactly_its_wheels_and_lists_them(
    bx, platform_zips, plain_zip, wheel_dir
):
    with zipfile.ZipFile(plain_zip) as zf:
        plain_names = zf.namelist()
    source = tomllib.loads((ROOT / "blender_manifest.toml").read_text())
    for platform, path in platform_zips.items():
        assert path.name == f"neural_rom-{source['version']}-{platform.replace('-', '_')}.zip"
        with zipfile.ZipFile(path) as zf:
            assert zf.testzip() is None
            names = zf.namelist()
            wheels = sorted(n for n in names if n.startswith("wheels/"))
            assert wheels == [f"wheels/{w}" for w in expected_wheels(bx, platform)], platform
            # Blender's order: manifest, wheels, then the same files as the plain zip.
            assert names[0] == "blender_manifest.toml"
            assert names[1 : 1 + len(wheels)] == wheels
            assert [n for n in names if not n.startswith("wheels/")] == plain_names
            for name in wheels:  # the wheels go in unchanged, stored (not deflated)
                assert zf.getinfo(name).compress_type == zipfile.ZIP_STORED
                folder = "any" if name.endswith("-none-any.whl") else platform
                assert zf.read(name) == (wheel_dir / folder / Path(name).name).read_bytes()
            manifest = tomllib.loads(zf.read("blender_manifest.toml").decode())
        assert manifest["platforms"] == [platform]
        assert manifest["wheels"] == [f"./{w}" for w in wheels]
        rest = {k: v for k, v in manifest.items() if k not in ("platforms", "wheels")}
        assert rest == dict(source, blender_version_max="5.1.0")


def test_platform_zips_pass_blenders_strict_validation(bx, platform_zips, blender_ext_path):
    blender_ext = load_script("blender_ext", blender_ext_path)
    for platform, path in platform_zips.items():
        with zipfile.ZipFile(path) as zf:
            result = blender_ext.pkg_manifest_from_zipfile_and_validate_all_errors(
                zf, "", strict=True
            )
            assert not isinstance(result, list), result
            assert result.platforms == [platform]
            wheels = sorted(n for n in zf.namelist() if n.startswith("wheels/"))
        assert sorted(result.wheels) == [f"./{w}" for w in wheels]
        # Blender's own filter keeps every listed wheel for this platform, and no other.
        assert blender_ext.paths_filter_wheels_by_platform(result.wheels, platform) == result.wheels
        for other in bx.PLATFORMS:
            if other != platform:
                kept = blender_ext.paths_filter_wheels_by_platform(result.wheels, other)
                assert all("-none-any" in w for w in kept), (platform, other)
        assert blender_ext.python_versions_from_wheels(result.wheels) == {(3, 11)}
    proc = subprocess.run(
        [sys.executable, str(blender_ext_path), "validate", str(platform_zips["linux-x64"])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and "Success" in proc.stdout, proc.stdout + proc.stderr


def test_platform_zips_match_blenders_split_platforms_build(
    bx, tmp_path, plain_zip, wheel_dir, blender_ext_path, platform_zips
):
    # Blender's way: the source manifest lists every wheel and platform; --split-platforms
    # makes one zip per platform, with [build.generated] platforms and wheels.
    src = extracted_source(plain_zip, tmp_path / "blender_src")
    (src / "wheels").mkdir()
    for platform in bx.PLATFORMS:
        for name in expected_wheels(bx, platform):
            folder = "any" if name.endswith("-none-any.whl") else platform
            shutil.copy(wheel_dir / folder / name, src / "wheels" / name)
    all_wheels = sorted(p.name for p in (src / "wheels").iterdir())
    text = (src / "blender_manifest.toml").read_text()
    head = "platforms = [{}]\nwheels = [{}]\n".format(
        ", ".join(f'"{p}"' for p in bx.PLATFORMS),
        ", ".join(f'"./wheels/{w}"' for w in all_wheels),
    )
    (src / "blender_manifest.toml").write_text(head + text)
    out = tmp_path / "blender_dist"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, str(blender_ext_path), "build", "--split-platforms",
         "--source-dir", str(src), "--output-dir", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    blender_ext = load_script("blender_ext", blender_ext_path)
    theirs = {p.name: p for p in out.glob("*.zip")}
    assert sorted(theirs) == sorted(p.name for p in platform_zips.values())
    for path in platform_zips.values():
        with zipfile.ZipFile(path) as a, zipfile.ZipFile(theirs[path.name]) as b:
            assert sorted(a.namelist()) == sorted(b.namelist()), path.name
            ma = blender_ext.pkg_manifest_from_zipfile_and_validate(a, "", strict=True)
            mb = blender_ext.pkg_manifest_from_zipfile_and_validate(b, "", strict=True)
            assert (ma.platforms, sorted(ma.wheels)) == (mb.platforms, sorted(mb.wheels))


def test_the_plain_build_never_takes_a_wheels_folder(bx, tmp_path, plain_zip, wheel_dir):
    src = extracted_source(plain_zip, tmp_path / "src")
    shutil.copytree(wheel_dir, src / "wheels")
    out = bx.build(src, output=tmp_path / "plain.zip")
    with zipfile.ZipFile(out) as zf, zipfile.ZipFile(plain_zip) as ref:
        assert zf.namelist() == ref.namelist()
        assert "platforms" not in tomllib.loads(zf.read("blender_manifest.toml").decode())
    # ... while the platform builds take their wheels from that folder by default.
    outs = bx.build_platforms(src, platforms=["macos-arm64"], output_dir=tmp_path / "d")
    version = tomllib.loads((src / "blender_manifest.toml").read_text())["version"]
    assert [p.name for p in outs] == [f"neural_rom-{version}-macos_arm64.zip"]


def test_command_line_builds_the_named_platforms_offline(bx, tmp_path, wheel_dir, capsys):
    out = tmp_path / "ext.zip"
    argv = ["--wheel-dir", str(wheel_dir), "--platform", "windows-x64",
            "--platform", "linux-x64", "--output", str(out), "--list"]  # fmt: skip
    assert bx.main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    created = [line for line in printed if line.startswith("created: ")]
    assert [c.split()[1] for c in created] == [
        str(tmp_path / "ext-windows_x64.zip"),
        str(tmp_path / "ext-linux_x64.zip"),
    ]
    assert f"wheels/{expected_wheels(bx, 'windows-x64')[0]}" in printed
    with pytest.raises(SystemExit):
        bx.main(["--platform", "linux-x64"])  # a platform needs wheels
    assert "--platform needs --wheels or --wheel-dir" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# Errors a person can act on
# ---------------------------------------------------------------------------------------


def test_a_missing_wheel_says_how_to_get_it(bx, tmp_path, wheel_dir):
    partial = tmp_path / "partial"
    shutil.copytree(wheel_dir, partial)
    scipy = bx.WHEEL_PINS["scipy"]
    (partial / "macos-x64" / f"scipy-{scipy}-cp311-cp311-macosx_10_13_x86_64.whl").unlink()
    assert len(bx.select_wheels(partial, "linux-x64")) == len(bx.WHEEL_PINS)
    with pytest.raises(SystemExit, match=rf"no macos-x64 wheel for scipy {scipy} .*--wheels"):
        bx.build_platforms(ROOT, partial, output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-built
    with pytest.raises(SystemExit, match="unknown platform 'linux-arm64'"):
        bx.select_wheels(partial, "linux-arm64")


def test_two_candidate_wheels_are_refused(bx, tmp_path, wheel_dir):
    dup = tmp_path / "dup"
    shutil.copytree(wheel_dir, dup)
    make_wheel(dup / "linux-x64", "scipy", bx.WHEEL_PINS["scipy"],
               "cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64")  # fmt: skip
    with pytest.raises(SystemExit, match="2 scipy .* wheels for linux-x64 .*delete all but one"):
        bx.select_wheels(dup, "linux-x64")


def test_requirements_of_the_bundled_wheels_are_checked(bx, tmp_path, wheel_dir, monkeypatch):
    wheels = bx.select_wheels(wheel_dir, "windows-x64")
    assert bx.check_requirements(wheels, "windows-x64") == []
    bad = tmp_path / "bad"
    shutil.copytree(wheel_dir, bad)
    rich = bx.WHEEL_PINS["rich"]
    make_wheel(bad / "any", "rich", rich, "py3-none-any",
               requires=["pygments>=99", "colorama; sys_platform == 'win32'",
                         "typing-extensions; python_version < '3.11'"])  # fmt: skip
    scipy = bx.WHEEL_PINS["scipy"]
    make_wheel(bad / "windows-x64", "scipy", scipy, "cp311-cp311-win_amd64",
               requires=["numpy>=1.26.4"])  # fmt: skip
    problems = bx.check_requirements(bx.select_wheels(bad, "windows-x64"), "windows-x64")
    assert len(problems) == 3, problems
    assert any("pygments>=99" in p and "WHEEL_PINS['pygments']" in p for p in problems)
    assert any("colorama" in p and "add colorama to WHEEL_PINS" in p for p in problems)
    assert any("numpy>=1.26.4" in p and "Blender's numpy is 1.24.3" in p for p in problems)
    # Markers are evaluated for the target: on Linux, colorama is not needed.
    linux = bx.check_requirements(bx.select_wheels(bad, "linux-x64"), "linux-x64")
    assert not any("colorama" in p for p in linux)
    with pytest.raises(SystemExit, match="do not fit together"):
        bx.build_platforms(ROOT, bad, ["windows-x64"], output_dir=tmp_path / "out")


def test_manifest_keys_the_builder_writes_must_not_be_in_the_source(bx):
    text = (ROOT / "blender_manifest.toml").read_text()
    with pytest.raises(SystemExit, match='sets "wheels": remove it'):
        bx.platform_manifest('wheels = ["./wheels/x-1-py3-none-any.whl"]\n' + text, "linux-x64", [])
    with pytest.raises(SystemExit, match='lower blender_version_max to "5.1.0"'):
        bx.platform_manifest('blender_version_max = "5.2.0"\n' + text, "linux-x64", [])
    kept = bx.platform_manifest('blender_version_max = "4.5.0"\n' + text, "linux-x64", [])
    assert tomllib.loads(kept)["blender_version_max"] == "4.5.0"


# ---------------------------------------------------------------------------------------
# Download (fake pip: no network)
# ---------------------------------------------------------------------------------------

FAKE_PIP = """
import json, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_build_wheels import BINARY, make_wheel
args = sys.argv[2:]
assert sys.argv[1] == "download", sys.argv
log = Path({log!r})
log.write_text(log.read_text() + json.dumps(args) + "\\n" if log.exists() else json.dumps(args) + "\\n")
dest = Path(args[args.index("--dest") + 1])
tag = args[args.index("--platform") + 1]
for pin in [a for a in args if "==" in a]:
    dist, version = pin.split("==")
    if dist in BINARY:
        make_wheel(dest, dist, version, "cp311-cp311-" + tag)
    else:
        make_wheel(dest, dist, version, "py3-none-any")
"""


def test_download_runs_pip_per_platform_and_shares_pure_wheels(bx, tmp_path):
    log = tmp_path / "pip.log"
    script = tmp_path / "fake_pip.py"
    script.write_text(FAKE_PIP.format(tests=str(ROOT / "tests"), log=str(log)))
    dest = tmp_path / "wheels"
    pip = [sys.executable, str(script)]
    bx.download_wheels(dest, ["linux-x64", "macos-arm64"], pip=pip)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 2
    for call, platform in zip(calls, ["linux-x64", "macos-arm64"], strict=True):
        assert "--only-binary=:all:" in call and "--no-deps" in call
        assert call[call.index("--python-version") + 1] == "3.11"
        assert call[call.index("--implementation") + 1] == "cp"
        tags = [call[i + 1] for i, a in enumerate(call) if a == "--platform"]
        assert tags == list(bx.PLATFORMS[platform])
        assert call[call.index("--dest") + 1] == str(dest / platform)
        assert [a for a in call if "==" in a] == [f"{n}=={v}" for n, v in bx.WHEEL_PINS.items()]
    assert "--find-links" not in calls[0] and calls[1][calls[1].index("--find-links") + 1] == str(
        dest / "any"
    )
    tag = bx.PLATFORMS["linux-x64"][0]
    assert sorted(p.name for p in (dest / "linux-x64").iterdir()) == sorted(
        f"{d}-{v}-cp311-cp311-{tag}.whl" for d, v in bx.WHEEL_PINS.items() if d in BINARY
    )
    pure = sorted(p.name for p in (dest / "any").iterdir())
    assert pure == sorted(n for n in expected_wheels(bx, "linux-x64") if "none-any" in n)
    # A second run finds everything and does not call pip.
    bx.download_wheels(dest, ["linux-x64", "macos-arm64"], pip=pip)
    assert len(log.read_text().splitlines()) == 2
    # pip failing (no network, a pin without a wheel) is an error naming the platform.
    with pytest.raises(SystemExit, match=r"pip download for windows-x64 failed \(exit code 3\)"):
        bx.download_wheels(dest, ["windows-x64"], pip=[sys.executable, "-c", "raise SystemExit(3)"])


# ---------------------------------------------------------------------------------------
# Installed in Blender: the job worker sees the wheels
# ---------------------------------------------------------------------------------------


def test_extension_wheel_dirs(tmp_path):
    ext = tmp_path / "4.5" / "extensions"
    package = ext / "user_default" / "neural_rom"
    package.mkdir(parents=True)
    assert jobs.extension_wheel_dirs(package) == []  # no wheels installed yet
    site = ext / ".local" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    assert jobs.extension_wheel_dirs(package, (3, 11)) == [str(site)]
    assert jobs.extension_wheel_dirs(package, (3, 13)) == []
    # A checkout elsewhere: ~/src/neural_rom must not hand out ~/.local's site-packages.
    home = tmp_path / "home"
    (home / ".local" / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    assert jobs.extension_wheel_dirs(home / "src" / "neural_rom", (3, 11)) == []
    assert jobs.extension_wheel_dirs() == []  # this checkout is not installed


CHILD = """
import importlib.util, json, sys
from pathlib import Path
here = Path({package!r})
spec = importlib.util.spec_from_file_location(
    "neural_rom", here / "__init__.py", submodule_search_locations=[str(here)])
module = importlib.util.module_from_spec(spec)
sys.modules["neural_rom"] = module
spec.loader.exec_module(module)
from neural_rom.core import jobs
env = jobs._child_env(sys.executable)
code = "import json, nrfake_scipy, nrfake_mdurl; print(json.dumps([nrfake_scipy.__file__, nrfake_scipy.TAGS]))"
import subprocess
out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
print(json.dumps({{"dirs": jobs.extension_wheel_dirs(), "rc": out.returncode,
                  "out": out.stdout, "err": out.stderr}}))
"""


def test_installed_zip_wheels_reach_the_job_worker(bx, tmp_path, platform_zips, bpy_scripts):
    # Install as Blender does: extract the zip into extensions/<repo>/<id>/, then its
    # wheel manager extracts the listed wheels into extensions/.local/.../site-packages.
    ext = tmp_path / "extensions"
    package = ext / "user_default" / "neural_rom"
    with zipfile.ZipFile(platform_zips["linux-x64"]) as zf:
        zf.extractall(package)
        manifest = tomllib.loads(zf.read("blender_manifest.toml").decode())
    wheel_manager = load_script(
        "wheel_manager",
        bpy_scripts / "modules" / "_bpy_internal" / "extensions" / "wheel_manager.py",
    )
    local = ext / ".local"
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site = local / "lib" / version / "site-packages"
    errors = []
    wheel_manager.apply_action(
        local_dir=str(local),
        local_dir_site_packages=str(site),
        wheel_list=[("neural_rom", [str(package / w) for w in manifest["wheels"]])],
        error_fn=errors.append,
        remove_error_fn=lambda path, exc: errors.append(exc),
        debug=False,
    )
    assert errors == [] and (site / "nrfake_scipy" / "__init__.py").is_file()
    # The job interpreter is this one (as Blender's own Python is Blender's): the child gets
    # the wheel folder although this process's sys.path lacks it (the fallback).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(package=str(package))],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["dirs"] == [str(site)]
    assert found["rc"] == 0, found["err"]
    path, tags = json.loads(found["out"])
    assert Path(path).parent.parent == site and tags.endswith(BINARY_TAGS["linux-x64"])


def test_another_interpreter_gets_no_wheel_folder(tmp_path, monkeypatch):
    ext = tmp_path / "extensions"
    site = ext / ".local" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setattr(jobs, "extension_wheel_dirs", lambda *a, **k: [str(site)])
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert str(site) in jobs._child_env(sys.executable)["PYTHONPATH"].split(os.pathsep)
    other = tmp_path / "python3"
    other.write_text("#!/bin/sh\nexit 0\n")
    other.chmod(0o755)
    assert "PYTHONPATH" not in jobs._child_env(str(other))
