"""Build the installable extension zips, one per platform, with Blender's own builder.

Usage::

    python scripts/build_extension.py [--blender PATH] [--output-dir DIR] [--offline]

``blender_manifest.toml`` declares the ``platforms`` and, under ``wheels``, every bundled
wheel file (``./wheels/<PyPI file name>``): the one table of pinned versions. This script

1. downloads (``pip download``, once per platform) the listed wheels that ``wheels/``
   lacks; a second run needs no network; ``--offline`` never downloads;
2. checks the list and the files: for each of Blender's Pythons (:data:`BLENDER_NUMPY`:
   3.11 for Blender 4.2 to 5.0, 3.13 for 5.1 and later) one wheel of each pinned
   distribution per platform, one version per Python on every platform, every runtime
   requirement either bundled for that Python at a version it admits or numpy admitting that
   Blender line's own;
3. runs ``blender --command extension build --split-platforms``, which writes
   ``<output-dir>/neural_rom-<version>-<platform>.zip`` (``linux_x64``, ``windows_x64``,
   ...), each holding that platform's wheels for both Pythons: Blender installs those of its
   own Python and skips the others. Blender is ``--blender PATH``; without it, the
   same builder from this Python's PyPI ``bpy`` (``addons_core/bl_pkg/cli/blender_ext.py``,
   the program ``blender --command extension`` runs, with Blender's tag list); without
   that, ``blender`` on ``PATH``.

What goes into a zip besides the wheels is Blender's business: the files of the source tree
that ``[build] paths_exclude_pattern`` of the manifest does not exclude. Blender installs the
wheels of its Python into ``extensions/.local/lib/python3.X/site-packages``; numpy is never
bundled.
"""

from __future__ import annotations

import argparse
import email.parser
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Sequence
from pathlib import Path

MANIFEST = "blender_manifest.toml"
ROOT = Path(__file__).resolve().parent.parent
WHEEL_FOLDER = "wheels"

#: Blender's Pythons -> the oldest numpy a Blender of that Python bundles; every bundled
#: wheel's numpy requirement must admit it. Blender 4.2 to 5.0 run Python 3.11 (numpy 1.24.3
#: in 4.2 and 4.3, 1.26.4 in 4.4 to 5.0); Blender 5.1 moved to Python 3.13 and numpy 2
#: (the PyPI bpy 5.2 and 5.3 require numpy >= 2.2).
BLENDER_NUMPY = {"3.11": "1.24.3", "3.13": "2.2.0"}
PYTHON_VERSIONS = tuple(BLENDER_NUMPY)
#: The first Blender the zips are not tested on (the manifest's exclusive maximum): 5.3 is
#: the newest release, and a later Python would need its own wheels.
BLENDER_VERSION_MAX = "5.4.0"

#: Blender platform -> ``pip download --platform`` tags, oldest OS each Blender 4.2 runs on
#: where the pinned wheels allow: glibc 2.28 on Linux (pip does not expand manylinux tags,
#: so they are listed down to 2.17), Windows 10 x64, macOS 11 on Intel (pip accepts older
#: macOS tags too), macOS 12 on Apple silicon (scipy has no macOS 11 arm64 wheel).
PIP_PLATFORMS: dict[str, tuple[str, ...]] = {
    "linux-x64": (
        *(f"manylinux_2_{minor}_x86_64" for minor in range(28, 16, -1)),
        "manylinux2014_x86_64",
    ),
    "windows-x64": ("win_amd64",),
    "macos-arm64": ("macosx_12_0_arm64",),
    "macos-x64": ("macosx_11_0_x86_64",),
}

#: Marker environment of each platform's Blender Python, for wheels' ``Requires-Dist``.
_MARKER_ENV = {
    "linux-x64": {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                  "platform_machine": "x86_64"},
    "windows-x64": {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt",
                    "platform_machine": "AMD64"},
    "macos-arm64": {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix",
                    "platform_machine": "arm64"},
    "macos-x64": {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix",
                  "platform_machine": "x86_64"},
}  # fmt: skip


class BuildError(SystemExit):
    """A build that cannot go on; the message says what to do (exit status 1)."""

    def __init__(self, message: str):
        super().__init__(f"error: {message}")


# ---------------------------------------------------------------------------------------
# Wheel file names
# ---------------------------------------------------------------------------------------


def normalize_name(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 503/427: ``markdown_it_py``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def parse_wheel_filename(filename: str) -> tuple[str, str, str, str, str]:
    """``(name, version, python tag, abi tag, platform tag)`` of a ``.whl`` file name.

    The name comes normalized (:func:`normalize_name`). Raises ``ValueError`` for a name
    that does not follow ``name-version[-build]-python-abi-platform.whl``.
    """
    if not filename.lower().endswith(".whl"):
        raise ValueError(f"not a wheel: {filename!r}")
    parts = filename[:-4].split("-")
    if not 5 <= len(parts) <= 6:
        raise ValueError(f"not a wheel file name (name-version-python-abi-platform): {filename!r}")
    return normalize_name(parts[0]), parts[1], parts[-3], parts[-2], parts[-1]


# Blender's mapping of wheel platform tags to its platforms (blender_ext.py, which
# `--split-platforms` uses), mirrored so that the checks pick the wheels Blender picks.
_WHEEL_SYSTEMS = {"macosx": "macos", "manylinux": "linux", "musllinux": "linux", "win": "windows"}
_WHEEL_MACHINES = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "aarch32": "arm32"}


def blender_platforms_of_wheel_tag(tag: str) -> list[str]:
    """Blender platforms a wheel platform tag serves (``win_amd64`` -> ``["windows-x64"]``,
    ``macosx_10_9_universal2`` -> both macOS ones; ``any`` -> all of :data:`PIP_PLATFORMS`)."""
    if tag == "any":
        return list(PIP_PLATFORMS)
    head, sep, tail = tag.partition("_")
    if not sep:
        return [tag]
    for wheel_system, system in _WHEEL_SYSTEMS.items():
        if head == wheel_system or (
            head.startswith(wheel_system) and head[len(wheel_system) :].isdigit()
        ):
            head = system
            break
    for wheel_machine, machine in _WHEEL_MACHINES.items():
        if tail == wheel_machine or tail.endswith("_" + wheel_machine):
            tail = machine
            break
    else:
        tail = tail.rpartition("_")[2]
    tails = ["x64", "arm64"] if (head, tail) == ("macos", "universal2") else [tail]
    return [f"{head}-{t}" for t in tails]


def wheel_fits(filename: str, platform: str, python: str) -> bool:
    """Whether the wheel file ``filename`` installs on Blender ``platform`` with Python
    ``python`` ("3.11"): its platform tag serves the platform and one of its Python tags
    is ``py3``, ``py311``, ``cp311``, or an ``abi3`` one of CPython 3.11 or older (as
    Blender's installer picks them, ``bl_extension_ops._extensions_wheel_filter_for_this_system``)."""
    _, _, python_tags, abi_tag, platform_tag = parse_wheel_filename(filename)
    if platform not in blender_platforms_of_wheel_tag(platform_tag):
        return False
    major, minor = (int(v) for v in python.split(".")[:2])
    for tag in python_tags.split("."):
        if tag in (f"py{major}", f"py{major}{minor}", f"cp{major}{minor}"):
            return True
        abi3 = re.fullmatch(rf"cp{major}(\d+)", tag) if abi_tag == "abi3" else None
        if abi3 and int(abi3.group(1)) <= minor:
            return True
    return False


# ---------------------------------------------------------------------------------------
# The manifest's wheel list
# ---------------------------------------------------------------------------------------


def read_manifest(source: Path) -> dict:
    path = Path(source) / MANIFEST
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise BuildError(f"no {MANIFEST} in {source}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BuildError(f"{path} is not valid TOML: {exc}") from None


def wheel_names(manifest: dict) -> list[str]:
    """The file names of the manifest's ``wheels`` (all under ``./wheels/``)."""
    names = []
    for entry in manifest.get("wheels") or []:
        folder, _, name = entry.rpartition("/")
        if folder != f"./{WHEEL_FOLDER}":
            raise BuildError(
                f'{MANIFEST}: wheel "{entry}" is not in ./{WHEEL_FOLDER}/: list it as '
                f'"./{WHEEL_FOLDER}/{name}"'
            )
        names.append(name)
    return names


def pins(manifest: dict, python: str) -> dict[str, str]:
    """Normalized distribution name -> version for Blender's Python ``python``, read from the
    manifest's wheel list (the wheels that fit that Python on any of its platforms)."""
    platforms = [p for p in manifest.get("platforms") or [] if p in PIP_PLATFORMS]
    out: dict[str, str] = {}
    for name in wheel_names(manifest):
        if any(wheel_fits(name, p, python) for p in platforms):
            dist, version = parse_wheel_filename(name)[:2]
            out.setdefault(dist, version)
    return out


def platform_wheels(manifest: dict, platform: str, python: str | None = None) -> list[str]:
    """The manifest's wheel file names that Blender puts in the ``platform`` zip; with
    ``python``, only those that Blender of that Python installs."""
    return [
        n
        for n in wheel_names(manifest)
        if platform in blender_platforms_of_wheel_tag(parse_wheel_filename(n)[4])
        and (python is None or wheel_fits(n, platform, python))
    ]


def check_manifest(manifest: dict) -> list[str]:
    """What is wrong with the manifest's ``platforms`` and ``wheels``, as messages (empty
    where all is well): for each of :data:`PYTHON_VERSIONS`, every platform must get exactly
    one wheel of each distribution pinned for any Python, all platforms the same version."""
    problems = []
    platforms = manifest.get("platforms") or []
    if not platforms:
        problems.append(f'{MANIFEST} declares no "platforms": list {", ".join(PIP_PLATFORMS)}')
    for platform in platforms:
        if platform not in PIP_PLATFORMS:
            problems.append(
                f'platform "{platform}": add its pip platform tags to PIP_PLATFORMS in '
                "scripts/build_extension.py"
            )
    most = manifest.get("blender_version_max")
    if most is None or _version_tuple(most) > _version_tuple(BLENDER_VERSION_MAX):
        problems.append(
            f"the wheels are for Python {' and '.join(PYTHON_VERSIONS)}, and Blender "
            f"{BLENDER_VERSION_MAX} is not tested: set blender_version_max = "
            f'"{BLENDER_VERSION_MAX}" in {MANIFEST}'
        )
    try:
        names = wheel_names(manifest)
        parsed = {n: parse_wheel_filename(n) for n in names}
    except ValueError as exc:
        return [*problems, f"{MANIFEST} wheels: {exc}"]
    known = [p for p in platforms if p in PIP_PLATFORMS]
    any_version = {dist: version for dist, version, *_ in parsed.values()}
    if "numpy" in any_version:
        problems.append("numpy is in the wheels: remove it, Blender ships numpy")
    tags = " or ".join(f"cp{v.replace('.', '')}" for v in PYTHON_VERSIONS)
    for name in names:
        if not any(wheel_fits(name, p, v) for p in known for v in PYTHON_VERSIONS):
            problems.append(
                f"{name} installs on none of the platforms with Python "
                f"{' or '.join(PYTHON_VERSIONS)}: list a {tags} (or py3) wheel of one of them"
            )
    for python in PYTHON_VERSIONS:
        versions: dict[str, set[str]] = {}
        for name in names:
            if any(wheel_fits(name, p, python) for p in known):
                versions.setdefault(parsed[name][0], set()).add(parsed[name][1])
        for dist, found in versions.items():
            if len(found) > 1:
                problems.append(
                    f"{dist} is pinned at {', '.join(sorted(found))} for Python {python}: list "
                    "one version for all platforms"
                )
        for platform in known:
            for dist in sorted(any_version):
                mine = [
                    n for n in platform_wheels(manifest, platform, python) if parsed[n][0] == dist
                ]
                if not mine:
                    version = min(versions.get(dist) or {any_version[dist]})
                    problems.append(
                        f"no {platform} wheel of {dist} for Python {python} in {MANIFEST}: add "
                        f"the file name that `pip download --python-version {python} "
                        f"--platform {PIP_PLATFORMS[platform][0]} {dist}=={version}` gets"
                    )
                elif len(mine) > 1:
                    problems.append(
                        f"{len(mine)} {platform} wheels of {dist} for Python {python} "
                        f"({', '.join(mine)}): keep one"
                    )
    return problems


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", version)[:3])


# ---------------------------------------------------------------------------------------
# Download
# ---------------------------------------------------------------------------------------


def missing_wheels(
    source: Path, manifest: dict, platform: str | None = None, python: str | None = None
) -> list[str]:
    """The manifest's wheel files (of ``platform`` and ``python``, default all) not in
    ``wheels/``."""
    if platform is None:
        names = wheel_names(manifest)
    else:
        names = platform_wheels(manifest, platform, python)
    folder = Path(source) / WHEEL_FOLDER
    return [n for n in names if not (folder / n).is_file()]


def download_wheels(source: Path, pip: Sequence[str] | None = None) -> None:
    """``pip download`` the wheels the manifest lists and ``wheels/`` lacks, one pip run
    per platform and Python that lacks any (pure-Python ones are fetched once, for the
    first).

    ``pip`` is the pip command, default ``[sys.executable, "-m", "pip"]``. pip chooses the
    file for each ``name==version`` from the platform's tags (:data:`PIP_PLATFORMS`): a
    choice other than the manifest's file name is an error naming both.
    """
    source = Path(source).resolve()
    manifest = read_manifest(source)
    problems = check_manifest(manifest)
    if problems:
        raise BuildError("fix the wheel list first:\n  " + "\n  ".join(problems))
    pip = list(pip) if pip is not None else [sys.executable, "-m", "pip"]
    folder = source / WHEEL_FOLDER
    for platform, python in [(p, v) for p in manifest["platforms"] for v in PYTHON_VERSIONS]:
        missing = missing_wheels(source, manifest, platform, python)
        if not missing:
            continue
        folder.mkdir(exist_ok=True)
        requested = sorted({"{}=={}".format(*parse_wheel_filename(n)[:2]) for n in missing})
        with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
            cmd = [*pip, "download", "--only-binary=:all:", "--no-deps"]
            cmd += ["--python-version", python, "--implementation", "cp"]
            for tag in PIP_PLATFORMS[platform]:
                cmd += ["--platform", tag]
            cmd += ["--dest", tmp, *requested]
            print(f"wheels: {platform}, Python {python}: {' '.join(cmd)}", flush=True)
            proc = subprocess.run(cmd, check=False)
            if proc.returncode != 0:
                raise BuildError(
                    f"pip download for {platform}, Python {python} failed (exit code "
                    f"{proc.returncode}): see its output above; it needs the network (or put "
                    f"the files in {folder})"
                )
            got = sorted(p.name for p in Path(tmp).glob("*.whl"))
            for name in missing:
                if name in got:
                    os.replace(Path(tmp) / name, folder / name)
        still = missing_wheels(source, manifest, platform, python)
        if still:
            raise BuildError(
                f"pip download for {platform}, Python {python} got {', '.join(got)}, not "
                f"{', '.join(still)}, which {MANIFEST} lists: put the file names pip chose in "
                "its wheels"
            )


# ---------------------------------------------------------------------------------------
# Requirements of the bundled wheels
# ---------------------------------------------------------------------------------------


def _packaging():
    """``packaging`` (or pip's copy of it), or None where neither is installed."""
    try:
        from packaging.markers import default_environment
        from packaging.requirements import Requirement
    except ImportError:
        try:
            from pip._vendor.packaging.markers import default_environment
            from pip._vendor.packaging.requirements import Requirement
        except ImportError:
            return None
    return Requirement, default_environment


def wheel_requirements(path: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's ``*.dist-info/METADATA``."""
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if len(names) != 1:
            raise BuildError(f"{path.name} has no single .dist-info/METADATA: delete it and rerun")
        metadata = email.parser.BytesParser().parsebytes(zf.read(names[0]), headersonly=True)
    return metadata.get_all("Requires-Dist") or []


def check_requirements(
    wheels: Sequence[Path], platform: str, pinned: dict[str, str], python: str
) -> list[str]:
    """What the bundled ``wheels`` need on ``platform`` with Blender's Python ``python``
    and do not get, as messages.

    Every runtime requirement (``Requires-Dist`` without an unmet marker, extras left out)
    must be a distribution of ``pinned`` (:func:`pins` of that Python) at a version it
    admits, or numpy admitting that Python's Blender numpy (:data:`BLENDER_NUMPY`). Empty
    where all is well, or where ``packaging`` is not there to read the requirements (then
    nothing is checked).
    """
    found = _packaging()
    if found is None:
        return []
    Requirement, default_environment = found
    env = default_environment()
    env.update(_MARKER_ENV[platform])
    env.update(
        python_version=python,
        python_full_version=python + ".0",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        extra="",
    )
    problems = []
    for path in wheels:
        for line in wheel_requirements(path):
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            name = normalize_name(req.name)
            have = BLENDER_NUMPY[python] if name == "numpy" else pinned.get(name)
            where = (
                f"the numpy of Blender's Python {python}"
                if name == "numpy"
                else f"the pinned {req.name}"
            )
            if have is None:
                problems.append(
                    f"{path.name} needs {line!r}: add {req.name}'s wheels for Python {python} "
                    f"to {MANIFEST}"
                )
            elif not req.specifier.contains(have, prereleases=True):
                problems.append(f"{path.name} needs {line!r}, but {where} is {have}")
    return problems


def check_wheels(source: Path) -> dict:
    """Check the manifest's wheel list and the files in ``wheels/``; returns the manifest.

    Raises :class:`BuildError` saying what to fix or fetch.
    """
    source = Path(source).resolve()
    manifest = read_manifest(source)
    problems = check_manifest(manifest)
    if problems:
        raise BuildError("fix the wheel list first:\n  " + "\n  ".join(problems))
    missing = missing_wheels(source, manifest)
    if missing:
        raise BuildError(
            f"no wheel file {', '.join(missing)} in {source / WHEEL_FOLDER}: run "
            "`python scripts/build_extension.py` without --offline, which downloads the wheels "
            f"{MANIFEST} lists (pip, network)"
        )
    folder = source / WHEEL_FOLDER
    problems = [
        msg
        for v in PYTHON_VERSIONS
        for p in manifest["platforms"]
        for msg in check_requirements(
            [folder / n for n in platform_wheels(manifest, p, v)], p, pins(manifest, v), v
        )
    ]
    if problems:
        raise BuildError("the pinned wheels do not fit together:\n  " + "\n  ".join(problems))
    return manifest


# ---------------------------------------------------------------------------------------
# Blender's builder
# ---------------------------------------------------------------------------------------


def pypi_bpy_scripts() -> Path | None:
    """The ``scripts`` folder of this Python's PyPI ``bpy`` (not imported), or None."""
    spec = importlib.util.find_spec("bpy")
    if spec is None or spec.origin is None:
        return None
    found = sorted(Path(spec.origin).parent.glob("*/scripts/addons_core/bl_pkg/cli/blender_ext.py"))
    return found[-1].parents[3] if found else None


def build_command(
    source: Path, output_dir: Path, blender: str | os.PathLike | None = None
) -> list[str]:
    """``blender --command extension build --split-platforms`` of ``source`` into
    ``output_dir``, as a command line.

    ``blender``: a Blender executable; default the PyPI ``bpy``'s builder (run by this
    Python, given the tag list Blender gives it), else ``blender`` on ``PATH``.
    """
    args = ["--split-platforms", "--source-dir", str(source), "--output-dir", str(output_dir)]
    if blender is None:
        scripts = pypi_bpy_scripts()
        if scripts is not None:
            cli = scripts / "addons_core" / "bl_pkg" / "cli" / "blender_ext.py"
            tags = scripts / "modules" / "_bpy_internal" / "extensions" / "tags.py"
            return [sys.executable, str(cli), "build", "--valid-tags", str(tags), *args]
        blender = shutil.which("blender")
        if blender is None:
            raise BuildError(
                "no Blender to build with: pass --blender /path/to/blender (4.2 or later), or "
                "run this script with .venv/bin/python (`bash scripts/setup_env.sh` makes it), "
                "whose PyPI bpy carries Blender's extension builder"
            )
    return [os.fspath(blender), "--command", "extension", "build", *args]


def build(
    source: Path = ROOT,
    output_dir: Path | None = None,
    *,
    blender: str | os.PathLike | None = None,
    download: bool = True,
    pip: Sequence[str] | None = None,
) -> list[Path]:
    """Fetch and check the wheels, then build one zip per platform; returns their paths.

    Parameters
    ----------
    source : Path
        The extension root (holds ``blender_manifest.toml`` and ``wheels/``).
    output_dir : Path or None
        Default ``<source>/dist``.
    blender : path or None
        A Blender executable (see :func:`build_command`).
    download : bool
        :func:`download_wheels` what ``wheels/`` lacks first (pip, the network).
    pip : sequence of str or None
        The pip command, for :func:`download_wheels`.

    Returns
    -------
    list of Path
        ``<output_dir>/<id>-<version>-<platform>.zip``, in the manifest's platform order.
    """
    source = Path(source).resolve()
    output_dir = Path(output_dir).resolve() if output_dir is not None else source / "dist"
    if download:
        download_wheels(source, pip=pip)
    manifest = check_wheels(source)
    output_dir.mkdir(parents=True, exist_ok=True)
    cmd = build_command(source, output_dir, blender)
    print(f"build: {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, check=False)
    if proc.returncode != 0:
        raise BuildError(
            f"Blender's extension builder failed (exit code {proc.returncode}): see its output "
            "above"
        )
    stem = f"{manifest['id']}-{manifest['version']}"
    zips = [output_dir / f"{stem}-{p.replace('-', '_')}.zip" for p in manifest["platforms"]]
    absent = [z.name for z in zips if not z.is_file()]
    if absent:
        raise BuildError(f"Blender's extension builder did not write {', '.join(absent)}")
    return zips


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source", type=Path, default=ROOT, help="extension root (default: this repository)"
    )
    parser.add_argument(
        "--output-dir", type=Path, help="folder for the zips (default: <source>/dist)"
    )
    parser.add_argument(
        "--blender",
        help="Blender executable to build with (default: this Python's PyPI bpy, else "
        "`blender` on PATH)",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="do not download: build from the wheels already in <source>/wheels",
    )
    args = parser.parse_args(argv)
    zips = build(args.source, args.output_dir, blender=args.blender, download=not args.offline)
    for path in zips:
        print(f"created: {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
