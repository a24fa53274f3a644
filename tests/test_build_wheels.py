"""The platform zips with their wheels (scripts/build_extension.py, Blender's builder).

No network: the wheels are tiny, valid fake wheels made here under the file names that
``blender_manifest.toml`` lists (PyPI's), and pip is a fake script. The zips are built by
Blender's own ``extension build --split-platforms`` from the PyPI bpy, and checked with its
strict manifest validator, its ``validate`` command and the wheel installer Blender runs when
an extension is installed (``_bpy_internal/extensions/wheel_manager.py``).
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
# What runs in Blender and in the job worker: all that ships besides the manifest and wheels.
RUNTIME_FOLDERS = ("addon", "core", "training", "ui")
RUNTIME_FILES = ("__init__.py", "worker.py")


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
def bpy_scripts(bx) -> Path:
    found = bx.pypi_bpy_scripts()
    assert found is not None, "the PyPI bpy ships no scripts/addons_core/bl_pkg"
    return found


@pytest.fixture(scope="module")
def blender_ext_path(bpy_scripts) -> Path:
    return bpy_scripts / "addons_core" / "bl_pkg" / "cli" / "blender_ext.py"


@pytest.fixture(scope="module")
def blender_ext(blender_ext_path):
    return load_script("blender_ext", blender_ext_path)


@pytest.fixture(scope="module")
def manifest(bx) -> dict:
    return bx.read_manifest(ROOT)


# ---------------------------------------------------------------------------------------
# Fake wheels
# ---------------------------------------------------------------------------------------

# Runtime requirements as the real wheels state them (abridged), by normalized name.
REQUIRES = {
    "scipy": ["numpy<2.5,>=1.23.5", 'pytest>=8.0.0; extra == "test"'],
    "tetgen": ["numpy", 'pyvista; extra == "extras"'],
    "pyamg": ["numpy>=1.23.5", "scipy>=1.11.0"],
    "meshio": ["numpy >=1.20.0", "rich", 'importlib-metadata ; python_version < "3.8"'],
    "rich": ["markdown-it-py (>=2.2.0)", "pygments (>=2.13.0,<3.0.0)"],
    "markdown_it_py": ["mdurl~=0.1"],
}


def module_name(dist: str) -> str:
    # "nrfake_" keeps a fake wheel from shadowing a real package in a child process.
    return "nrfake_" + dist.replace("-", "_").lower()


def make_wheel(folder: Path, filename: str, requires: list[str] | None = None) -> Path:
    """A small, valid wheel named ``filename``: one module, METADATA, WHEEL and a RECORD
    with hashes; ``requires`` default: :data:`REQUIRES` of its distribution."""
    stem, version, python, abi, platform = filename[:-4].split("-")
    info = f"{stem}-{version}.dist-info"
    tags = f"{python}-{abi}-{platform}"
    if requires is None:
        requires = REQUIRES.get(stem.lower(), [])
    files = {
        f"{module_name(stem)}/__init__.py": f"VERSION = {version!r}\nTAGS = {tags!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {stem}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
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
    path = folder / filename
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def copy_source(dest: Path, bx) -> Path:
    """The extension's source tree (what a checkout holds), with a fake wheel for each
    wheel the manifest lists in ``wheels/``, plus files that must never ship."""
    shutil.copytree(
        ROOT,
        dest,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "wheels", "dist", "out", "build", "__pycache__", ".*_cache"
        ),
    )
    for name in bx.wheel_names(bx.read_manifest(dest)):
        make_wheel(dest / "wheels", name)
    # Decoys: an unlisted wheel (numpy: Blender ships it), caches, a virtualenv, docs.
    make_wheel(dest / "wheels", "numpy-1.26.4-cp311-cp311-win_amd64.whl")
    for name in ("core/__pycache__/x.cpython-311.pyc", ".venv/lib/x.py", "docs/notes.md",
                 "out/bake.npy", "dist/old.zip"):  # fmt: skip
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text("not for the zip\n")
    return dest


@pytest.fixture(scope="module")
def source(tmp_path_factory, bx) -> Path:
    return copy_source(tmp_path_factory.mktemp("checkout") / "neural_rom", bx)


@pytest.fixture(scope="module")
def platform_zips(tmp_path_factory, bx, source) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    zips = bx.build(source, out, download=False)
    platforms = bx.read_manifest(source)["platforms"]
    return dict(zip(platforms, zips, strict=True))


def runtime_files(source: Path) -> list[str]:
    """Root-relative names of the files that must ship (besides manifest and wheels)."""
    names = [n for n in RUNTIME_FILES if (source / n).is_file()]
    for folder in RUNTIME_FOLDERS:
        for path in (source / folder).rglob("*"):
            rel = path.relative_to(source).as_posix()
            if path.is_file() and "__pycache__" not in rel and not path.name.startswith("."):
                names.append(rel)
    return sorted(names)


# ---------------------------------------------------------------------------------------
# The manifest's wheel list: the one table of pins
# ---------------------------------------------------------------------------------------


def test_the_wheel_list_pins_what_core_imports_for_every_platform_and_python(bx, manifest):
    assert bx.check_manifest(manifest) == []
    assert bx.PYTHON_VERSIONS == ("3.11", "3.13")
    pins = {v: bx.pins(manifest, v) for v in bx.PYTHON_VERSIONS}
    for python, pinned in pins.items():
        assert {"scipy", "tetgen", "meshio", "pyamg", "rich"} <= set(pinned), python
        assert "numpy" not in pinned
        assert set(pinned) == set(pins["3.11"])  # the same distributions for both
    assert pins["3.11"]["scipy"] == "1.15.3"  # the last that runs on Blender 4.2's numpy 1.24.3
    assert pins["3.13"]["scipy"] == "1.18.1"  # numpy 2 (1.15.3 warns on numpy 2.5)
    assert pins["3.11"]["meshio"] == pins["3.13"]["meshio"]  # a py3 wheel serves both
    assert manifest["platforms"] == list(bx.PIP_PLATFORMS)
    for platform in manifest["platforms"]:
        every = set(bx.platform_wheels(manifest, platform))
        for python, pinned in pins.items():
            names = bx.platform_wheels(manifest, platform, python)
            assert sorted(bx.parse_wheel_filename(n)[0] for n in names) == sorted(pinned)
            assert all(bx.wheel_fits(n, platform, python) for n in names), platform
            other = "3.13" if python == "3.11" else "3.11"
            assert (every - set(names)) <= set(bx.platform_wheels(manifest, platform, other))
        assert every == set().union(*(bx.platform_wheels(manifest, platform, v) for v in pins))
    assert manifest["blender_version_max"] == bx.BLENDER_VERSION_MAX == "5.4.0"


def test_wheel_platform_tags_map_to_blender_platforms_as_blender_maps_them(
    bx, blender_ext, manifest
):
    tags = [
        "win_amd64", "win32", "manylinux_2_17_x86_64.manylinux2014_x86_64",
        "manylinux_2_27_x86_64.manylinux_2_28_x86_64", "manylinux2014_aarch64",
        "musllinux_1_2_x86_64", "macosx_12_0_arm64", "macosx_10_13_x86_64",
        "macosx_10_9_universal2", "linux_x86_64", "win_arm64",
    ]  # fmt: skip
    for tag in tags:
        ours = bx.blender_platforms_of_wheel_tag(tag)
        assert ours == blender_ext.blender_platforms_from_wheel_platform(tag), tag
    for platform, pip_tags in bx.PIP_PLATFORMS.items():  # every tag pip is given serves it
        for tag in pip_tags:
            assert bx.blender_platforms_of_wheel_tag(tag) == [platform], tag
    for platform in manifest["platforms"]:  # the checks pick the wheels Blender picks
        theirs = blender_ext.paths_filter_wheels_by_platform(manifest["wheels"], platform)
        assert theirs == [f"./wheels/{n}" for n in bx.platform_wheels(manifest, platform)]


def test_wheel_fits_checks_platform_and_python(bx):
    fits = bx.wheel_fits
    assert fits("scipy-1.15.3-cp311-cp311-win_amd64.whl", "windows-x64", "3.11")
    assert not fits("scipy-1.15.3-cp311-cp311-win_amd64.whl", "linux-x64", "3.11")
    assert not fits("scipy-1.15.3-cp311-cp311-win_amd64.whl", "windows-x64", "3.13")
    assert fits("scipy-1.18.1-cp313-cp313-win_amd64.whl", "windows-x64", "3.13")
    assert not fits("scipy-1.15.3-cp312-cp312-win_amd64.whl", "windows-x64", "3.11")
    assert not fits("scipy-1.15.3-cp310-cp310-win_amd64.whl", "windows-x64", "3.11")
    assert fits("x-1.0-cp38-abi3-win_amd64.whl", "windows-x64", "3.11")  # stable ABI
    assert not fits("x-1.0-cp312-abi3-win_amd64.whl", "windows-x64", "3.11")
    assert fits("x-1.0-cp312-abi3-win_amd64.whl", "windows-x64", "3.13")  # tetgen's
    assert fits("rich-15.0.0-py3-none-any.whl", "macos-arm64", "3.11")
    assert fits("rich-15.0.0-py3-none-any.whl", "macos-arm64", "3.13")
    assert fits("six-1.16.0-py2.py3-none-any.whl", "linux-x64", "3.11")
    assert not fits("old-1.0-py2-none-any.whl", "linux-x64", "3.11")
    assert fits("x-1.0-cp311-cp311-macosx_10_9_universal2.whl", "macos-arm64", "3.11")
    assert bx.parse_wheel_filename("Markdown_It_Py-4.3.0-1-py3-none-any.whl") == (
        "markdown_it_py", "4.3.0", "py3", "none", "any"
    )  # fmt: skip
    with pytest.raises(ValueError, match="not a wheel file name"):
        bx.parse_wheel_filename("scipy-1.15.3.whl")


def test_the_checks_pick_the_wheels_blenders_installer_picks_for_this_python(bx, manifest):
    import bpy  # noqa: F401 (puts Blender's bl_pkg on the path)
    from bl_pkg.bl_extension_ops import _extensions_wheel_filter_for_this_system as blenders

    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    extra = ["x-1.0-cp38-abi3-manylinux_2_17_x86_64.whl", "x-1.0-cp314-abi3-manylinux_2_28_x86_64.whl",
             "x-1.0-py2.py3-none-any.whl", "x-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"]  # fmt: skip
    names = [*bx.wheel_names(manifest), *extra]
    linux = [f"./wheels/{n}" for n in names if "linux-x64" in bx.blender_platforms_of_wheel_tag(
        bx.parse_wheel_filename(n)[4])]  # fmt: skip
    ours = [w for w in linux if bx.wheel_fits(w.rpartition("/")[2], "linux-x64", python)]
    assert blenders(linux) == ours
    assert len(ours) == len(bx.pins(manifest, python)) + 2  # one of each, and two of x


def test_a_bad_wheel_list_says_what_to_fix(bx, manifest):
    def problems(**changes) -> str:
        return "\n".join(bx.check_manifest(dict(manifest, **changes)))

    wheels = manifest["wheels"]
    win_scipy = "./wheels/scipy-1.15.3-cp311-cp311-win_amd64.whl"
    assert problems(wheels=[w for w in wheels if w != win_scipy]) == (
        "no windows-x64 wheel of scipy for Python 3.11 in blender_manifest.toml: add the file "
        "name that `pip download --python-version 3.11 --platform win_amd64 scipy==1.15.3` gets"
    )
    mac_tetgen = "./wheels/tetgen-0.8.4-cp312-abi3-macosx_11_0_arm64.whl"
    assert "no macos-arm64 wheel of tetgen for Python 3.13" in problems(
        wheels=[w for w in wheels if w != mac_tetgen]
    )
    assert "scipy is pinned at 1.15.3, 1.16.0 for Python 3.11: list one version" in problems(
        wheels=[*wheels, "./wheels/scipy-1.16.0-cp311-cp311-win_amd64.whl"]
    )
    text = problems(wheels=[*wheels, "./wheels/scipy-1.16.0-cp313-cp313-win_amd64.whl"])
    assert "2 windows-x64 wheels of scipy for Python 3.13" in text
    assert "scipy is pinned at 1.16.0, 1.18.1 for Python 3.13" in text
    assert "numpy is in the wheels: remove it" in problems(
        wheels=[*wheels, "./wheels/numpy-1.26.4-cp311-cp311-win_amd64.whl"]
    )
    text = problems(wheels=[*wheels, "./wheels/x-1.0-cp312-cp312-win_amd64.whl"])
    assert "x-1.0-cp312-cp312-win_amd64.whl installs on none of the platforms" in text
    assert "list a cp311 or cp313 (or py3) wheel" in text
    assert 'set blender_version_max = "5.4.0"' in problems(blender_version_max="5.5.0")
    assert "add its pip platform tags to PIP_PLATFORMS" in problems(
        platforms=[*manifest["platforms"], "linux-arm64"]
    )
    with pytest.raises(SystemExit, match=r'list it as "\./wheels/x-1\.0-py3-none-any\.whl"'):
        bx.wheel_names({"wheels": ["./deps/x-1.0-py3-none-any.whl"]})


# ---------------------------------------------------------------------------------------
# The platform zips, as Blender's builder writes them
# ---------------------------------------------------------------------------------------


def test_each_platform_zip_holds_exactly_its_wheels_and_the_runtime_files(
    bx, source, platform_zips, manifest
):
    shipped = runtime_files(source)
    assert "core/jobs/__init__.py" in shipped and "ui/registration.py" in shipped
    for platform, path in platform_zips.items():
        assert path.name == f"neural_rom-{manifest['version']}-{platform.replace('-', '_')}.zip"
        wheels = bx.platform_wheels(manifest, platform)
        with zipfile.ZipFile(path) as zf:
            assert zf.testzip() is None
            names = zf.namelist()
            assert names[0] == "blender_manifest.toml"
            assert names[1 : 1 + len(wheels)] == [f"wheels/{w}" for w in wheels], platform
            rest = sorted(names[1 + len(wheels) :])
            assert rest == shipped, platform  # no docs, tests, README, caches, other wheels
            for name in wheels:  # the wheels go in unchanged, stored (not deflated)
                info = zf.getinfo(f"wheels/{name}")
                assert info.compress_type == zipfile.ZIP_STORED
                assert zf.read(info) == (source / "wheels" / name).read_bytes()
            jobs_file = "core/jobs/__init__.py"  # a nested package ships as it is
            assert zf.read(jobs_file) == (source / jobs_file).read_bytes()
            shipped_manifest = tomllib.loads(zf.read("blender_manifest.toml").decode())
        generated = shipped_manifest["build"].pop("generated")
        assert generated == {"platforms": [platform], "wheels": [f"./wheels/{w}" for w in wheels]}
        assert shipped_manifest == manifest


def test_platform_zips_pass_blenders_strict_validation(
    bx, platform_zips, blender_ext, blender_ext_path
):
    for platform, path in platform_zips.items():
        with zipfile.ZipFile(path) as zf:
            result = blender_ext.pkg_manifest_from_zipfile_and_validate_all_errors(
                zf, "", strict=True
            )
            assert not isinstance(result, list), result
            wheels = [n for n in zf.namelist() if n.startswith("wheels/")]
        assert result.platforms == [platform]
        assert result.wheels == [f"./{w}" for w in wheels]
        assert blender_ext.python_versions_from_wheels(result.wheels) == {(3, 11), (3, 13)}
    for path in platform_zips.values():
        proc = subprocess.run(
            [sys.executable, str(blender_ext_path), "validate", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0 and "Success" in proc.stdout, proc.stdout + proc.stderr


FAKE_BLENDER = """#!{python}
# `blender --command extension ...` as Blender runs it (bl_pkg/bl_extension_cli.py).
import importlib.util, json, sys
with open({log!r}, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:3] != ["--command", "extension"]:
    sys.exit("not a Blender command line: " + " ".join(sys.argv[1:]))
spec = importlib.util.spec_from_file_location("blender_ext", {cli!r})
blender_ext = importlib.util.module_from_spec(spec)
sys.modules["blender_ext"] = blender_ext
spec.loader.exec_module(blender_ext)
blender_ext.ARG_DEFAULTS_OVERRIDE.build_valid_tags = {tags!r}
sys.exit(blender_ext.main(sys.argv[3:], args_internal=False, prog="blender --command extension"))
"""


def test_a_blender_executable_builds_the_same_zips(
    bx, tmp_path, source, platform_zips, bpy_scripts, blender_ext_path, capsys
):
    log = tmp_path / "blender.log"
    blender = tmp_path / "blender"
    blender.write_text(
        FAKE_BLENDER.format(
            python=sys.executable,
            log=str(log),
            cli=str(blender_ext_path),
            tags=str(bpy_scripts / "modules" / "_bpy_internal" / "extensions" / "tags.py"),
        )
    )
    blender.chmod(0o755)
    out = tmp_path / "dist"
    argv = ["--source", str(source), "--output-dir", str(out), "--blender", str(blender)]
    assert bx.main([*argv, "--offline"]) == 0
    (call,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert call == ["--command", "extension", "build", "--split-platforms",
                    "--source-dir", str(source), "--output-dir", str(out)]  # fmt: skip
    created = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("created: ")]
    assert [ln.split()[1] for ln in created] == [str(out / p.name) for p in platform_zips.values()]
    for path in platform_zips.values():
        with zipfile.ZipFile(path) as a, zipfile.ZipFile(out / path.name) as b:
            assert a.namelist() == b.namelist()
            assert a.read("blender_manifest.toml") == b.read("blender_manifest.toml")


# ---------------------------------------------------------------------------------------
# Errors a person can act on
# ---------------------------------------------------------------------------------------


def wheel_checkout(tmp_path: Path, source: Path) -> Path:
    """A small source tree for the wheel checks: the manifest and the wheels."""
    dest = tmp_path / "src"
    dest.mkdir()
    shutil.copy(source / "blender_manifest.toml", dest)
    shutil.copytree(source / "wheels", dest / "wheels")
    return dest


def test_a_missing_wheel_says_how_to_get_it(bx, tmp_path, source, manifest):
    src = wheel_checkout(tmp_path, source)
    name = "scipy-1.15.3-cp311-cp311-macosx_10_13_x86_64.whl"
    (src / "wheels" / name).unlink()
    assert bx.missing_wheels(src, manifest, "linux-x64") == []
    assert bx.missing_wheels(src, manifest) == [name]
    with pytest.raises(bx.BuildError, match=rf"no wheel file {name} .*without --offline"):
        bx.build(src, tmp_path / "out", download=False)
    assert not (tmp_path / "out").exists()  # nothing half-built
    with pytest.raises(SystemExit, match="downloads the wheels blender_manifest.toml lists"):
        bx.main(["--source", str(src), "--offline"])


def test_requirements_of_the_bundled_wheels_are_checked(bx, tmp_path, source, manifest):
    pins = bx.pins(manifest, "3.11")
    for python in bx.PYTHON_VERSIONS:
        win = [source / "wheels" / n for n in bx.platform_wheels(manifest, "windows-x64", python)]
        assert bx.check_requirements(win, "windows-x64", bx.pins(manifest, python), python) == []
    src = wheel_checkout(tmp_path, source)
    make_wheel(src / "wheels", "rich-15.0.0-py3-none-any.whl",
               requires=["pygments>=99", "colorama; sys_platform == 'win32'",
                         "typing-extensions; python_version < '3.11'"])  # fmt: skip
    make_wheel(src / "wheels", "scipy-1.15.3-cp311-cp311-win_amd64.whl",
               requires=["numpy>=1.26.4"])  # fmt: skip
    win = [src / "wheels" / n for n in bx.platform_wheels(manifest, "windows-x64", "3.11")]
    problems = bx.check_requirements(win, "windows-x64", pins, "3.11")
    assert len(problems) == 3, problems
    assert any("pygments>=99" in p and "the pinned pygments is 2.21.0" in p for p in problems)
    assert any(
        "colorama" in p and "add colorama's wheels for Python 3.11 to blender_manifest" in p
        for p in problems
    )
    assert any(
        "numpy>=1.26.4" in p and "the numpy of Blender's Python 3.11 is 1.24.3" in p
        for p in problems
    )
    # Markers are evaluated for the target: on Linux, colorama is not needed.
    linux = [src / "wheels" / n for n in bx.platform_wheels(manifest, "linux-x64", "3.11")]
    assert not any("colorama" in p for p in bx.check_requirements(linux, "linux-x64", pins, "3.11"))
    # Each Python's wheels against its own Blender numpy: numpy 2 wheels for 3.13 only.
    make_wheel(src / "wheels", "scipy-1.18.1-cp313-cp313-win_amd64.whl",
               requires=["numpy>=2.0.0,<2.8"])  # fmt: skip
    win13 = [src / "wheels" / n for n in bx.platform_wheels(manifest, "windows-x64", "3.13")]
    assert not any(
        "numpy" in p
        for p in bx.check_requirements(win13, "windows-x64", bx.pins(manifest, "3.13"), "3.13")
    )
    make_wheel(src / "wheels", "scipy-1.15.3-cp311-cp311-win_amd64.whl",
               requires=["numpy>=2.0.0,<2.8"])  # fmt: skip
    assert any(
        "numpy>=2.0.0,<2.8" in p and "Python 3.11 is 1.24.3" in p
        for p in bx.check_requirements(win, "windows-x64", pins, "3.11")
    )
    with pytest.raises(bx.BuildError, match="do not fit together"):
        bx.build(src, tmp_path / "out", download=False)


# ---------------------------------------------------------------------------------------
# Download (fake pip: no network)
# ---------------------------------------------------------------------------------------

FAKE_PIP = """
import json, sys
from pathlib import Path
sys.path[:0] = [{tests!r}, {scripts!r}]
from build_extension import blender_platforms_of_wheel_tag, parse_wheel_filename, wheel_fits
from test_build_wheels import make_wheel
args = sys.argv[2:]
assert sys.argv[1] == "download", sys.argv
with open({log!r}, "a") as fh:
    fh.write(json.dumps(args) + "\\n")
dest = Path(args[args.index("--dest") + 1])
platform = blender_platforms_of_wheel_tag(args[args.index("--platform") + 1])[0]
python = args[args.index("--python-version") + 1]
index = json.loads(Path({index!r}).read_text())  # what "PyPI" has
for pin in [a for a in args if "==" in a]:
    for name in index:
        dist, version, _, _, tag = parse_wheel_filename(name)
        if f"{{dist}}=={{version}}" == pin and wheel_fits(name, platform, python):
            make_wheel(dest, name)
            break
    else:
        sys.exit(f"ERROR: No matching distribution found for {{pin}}")
"""


def fake_pip(tmp_path: Path, index: list[str]) -> tuple[list[str], Path]:
    log = tmp_path / "pip.log"
    (tmp_path / "index.json").write_text(json.dumps(index))
    script = tmp_path / "fake_pip.py"
    script.write_text(
        FAKE_PIP.format(
            tests=str(ROOT / "tests"),
            scripts=str(ROOT / "scripts"),
            log=str(log),
            index=str(tmp_path / "index.json"),
        )
    )
    return [sys.executable, str(script)], log


def test_download_runs_pip_per_platform_for_what_is_missing(bx, tmp_path, manifest):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "blender_manifest.toml", src)
    names = bx.wheel_names(manifest)
    pip, log = fake_pip(tmp_path, names)
    bx.download_wheels(src, pip=pip)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    runs = [(p, v) for p in manifest["platforms"] for v in bx.PYTHON_VERSIONS]
    assert len(calls) == len(runs) == 8
    for i, (call, (platform, python)) in enumerate(zip(calls, runs, strict=True)):
        assert "--only-binary=:all:" in call and "--no-deps" in call
        assert call[call.index("--python-version") + 1] == python
        assert call[call.index("--implementation") + 1] == "cp"
        tags = [call[j + 1] for j, a in enumerate(call) if a == "--platform"]
        assert tags == list(bx.PIP_PLATFORMS[platform])
        assert Path(call[call.index("--dest") + 1]).parent == src / "wheels"
        requested = [a for a in call if "==" in a]
        pins = bx.pins(manifest, python)
        binary = sorted(
            {
                "{}=={}".format(*bx.parse_wheel_filename(n)[:2])
                for n in bx.platform_wheels(manifest, platform, python)
                if "-none-any" not in n
            }
        )
        if i == 0:  # everything; later runs already have the pure-Python wheels
            assert len(requested) == len(pins)
        else:
            assert requested == binary
    assert "scipy==1.18.1" in calls[1] and "scipy==1.15.3" in calls[0]
    assert sorted(p.name for p in (src / "wheels").iterdir()) == sorted(names)  # no leftovers
    # A second run finds everything and does not call pip.
    bx.download_wheels(src, pip=pip)
    assert len(log.read_text().splitlines()) == len(calls)
    # pip failing (no network, a pin without a wheel) is an error naming the platform.
    (src / "wheels" / "scipy-1.15.3-cp311-cp311-win_amd64.whl").unlink()
    with pytest.raises(
        bx.BuildError, match=r"pip download for windows-x64, Python 3.11 failed \(exit code 3"
    ):
        bx.download_wheels(src, pip=[sys.executable, "-c", "raise SystemExit(3)"])


def test_pip_choosing_another_file_than_the_manifest_names_both(bx, tmp_path, manifest):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "blender_manifest.toml", src)
    listed = "scipy-1.15.3-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    other = "scipy-1.15.3-cp311-cp311-manylinux_2_28_x86_64.whl"
    index = [other if n == listed else n for n in bx.wheel_names(manifest)]
    pip, _ = fake_pip(tmp_path, index)
    with pytest.raises(bx.BuildError) as err:
        bx.download_wheels(src, pip=pip)
    text = str(err.value)
    assert "pip download for linux-x64, Python 3.11 got" in text and other in text
    assert f"not {listed}, which blender_manifest.toml lists" in text
    assert "put the file names pip chose in its wheels" in text


# ---------------------------------------------------------------------------------------
# Installed in Blender: the wheels reach the job worker, a job runs
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
env = jobs.interpreters.child_env(sys.executable)
code = "import json, nrfake_scipy, nrfake_mdurl; print(json.dumps([nrfake_scipy.__file__, nrfake_scipy.TAGS]))"
import subprocess
out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
print(json.dumps({{"dirs": jobs.extension_wheel_dirs(), "rc": out.returncode,
                  "out": out.stdout, "err": out.stderr}}))
"""


def install(zip_path: Path, ext: Path, bpy_scripts: Path) -> tuple[Path, Path]:
    """Install as Blender does: extract the zip into ``extensions/<repo>/<id>/``, then its
    wheel manager extracts the wheels of the manifest (its ``[build.generated]`` list) that
    fit this system and Python (Blender's own filter) into
    ``extensions/.local/.../site-packages``. Returns (package folder, site-packages)."""
    import bpy  # noqa: F401 (puts Blender's bl_pkg on the path)
    from bl_pkg.bl_extension_ops import _extensions_wheel_filter_for_this_system

    package = ext / "user_default" / "neural_rom"
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(package)
        manifest = tomllib.loads(zf.read("blender_manifest.toml").decode())
    wheels = _extensions_wheel_filter_for_this_system(manifest["build"]["generated"]["wheels"])
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
        wheel_list=[("neural_rom", [str(package / w) for w in wheels])],
        error_fn=errors.append,
        remove_error_fn=lambda path, exc: errors.append(exc),
        debug=False,
    )
    assert errors == []
    return package, site


def test_installed_zip_wheels_reach_the_job_worker(tmp_path, platform_zips, bpy_scripts):
    package, site = install(platform_zips["linux-x64"], tmp_path / "extensions", bpy_scripts)
    assert (site / "nrfake_scipy" / "__init__.py").is_file()
    assert not (site / "nrfake_numpy").exists()  # the decoy was never bundled
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
    py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert Path(path).parent.parent == site and tags.startswith(f"{py}-{py}-manylinux")


def test_the_built_extension_runs_a_job_from_its_install_folder(
    tmp_path, platform_zips, bpy_scripts
):
    # Installed, the package folder has another name and no tests, scripts or .venv.
    package, _ = install(platform_zips["linux-x64"], tmp_path / "extensions", bpy_scripts)
    spec = tmp_path / "job.spec.json"
    spec.write_text(json.dumps({"kind": "selftest", "steps": 3, "sleep": 0}))
    proc = subprocess.run(
        [sys.executable, str(package / "worker.py"), str(spec)],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout.splitlines()[-1])
    assert done["event"] == "done" and done["result"] == {"committed": 3, "steps": 3}
    assert f"package={package}" in proc.stderr


def test_another_interpreter_gets_no_wheel_folder(tmp_path, monkeypatch):
    ext = tmp_path / "extensions"
    site = ext / ".local" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setattr(jobs.interpreters, "extension_wheel_dirs", lambda *a, **k: [str(site)])
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert str(site) in jobs.interpreters.child_env(sys.executable)["PYTHONPATH"].split(os.pathsep)
    other = tmp_path / "python3"
    other.write_text("#!/bin/sh\nexit 0\n")
    other.chmod(0o755)
    assert "PYTHONPATH" not in jobs.interpreters.child_env(str(other))
