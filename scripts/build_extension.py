"""Build the installable extension zip, as ``blender --command extension build`` does.

Usage::

    python scripts/build_extension.py [--source DIR] [--output-dir DIR | --output FILE] [--list]
    python scripts/build_extension.py --wheels [--wheel-dir DIR] [--platform P ...]
    python scripts/build_extension.py --wheel-dir DIR [--platform P ...]

Without wheels it writes ``dist/neural_rom-<version>.zip``, the platform-independent zip
for a job interpreter that brings its own scipy: the manifest at the zip root, then every
file of the source tree that ``[build] paths_exclude_pattern`` in ``blender_manifest.toml``
does not exclude (gitignore-like patterns, matched the way Blender's extension builder
matches them: see :class:`PathPatterns`). Symbolic links are skipped.

With ``--wheels`` it first downloads (``pip download``) the wheels pinned in
:data:`WHEEL_PINS` for every platform in :data:`PLATFORMS` into ``wheels/<platform>/``
(pure-Python ones into ``wheels/any/``, shared), then writes one zip per platform,
``dist/neural_rom-<version>-<platform>.zip`` (``linux_x64``, ``windows_x64``, ...), as
``blender --command extension build --split-platforms`` does: the zip holds that
platform's wheels under ``wheels/`` and its manifest gains ``platforms = ["<platform>"]``,
``wheels = ["./wheels/...", ...]`` (exactly the wheels inside) and ``blender_version_max``
(the wheels are for Blender's Python 3.11). Blender installs them into its
``extensions/.local/lib/python3.11/site-packages`` when the extension is installed. With
``--wheel-dir`` and no ``--wheels`` the platform zips are built from the wheels already in
that folder, with no network. numpy is never bundled: Blender ships it.

Needs only the standard library, so it runs without Blender (CI, a farm node); ``--wheels``
also needs pip.
"""

from __future__ import annotations

import argparse
import email.parser
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Sequence
from pathlib import Path

MANIFEST = "blender_manifest.toml"
ROOT = Path(__file__).resolve().parent.parent

# Blender's default when a manifest has no [build] table.
DEFAULT_EXCLUDE = ["__pycache__/", ".*", "/*.zip"]

# ---------------------------------------------------------------------------------------
# Bundled wheels: the one table of pinned versions (reproducible builds)
# ---------------------------------------------------------------------------------------

#: Blender 4.2 to 5.0 run Python 3.11; Blender 5.1 moved to Python 3.13.
PYTHON_VERSION = "3.11"
#: The first Blender whose Python the cp311 wheels do not fit (the manifest's exclusive max).
BLENDER_VERSION_MAX = "5.1.0"
#: The oldest numpy a supported Blender bundles: 1.24.3 in Blender 4.2 and 4.3 (4.4 to 5.0
#: ship 1.26.4). Every bundled wheel's numpy requirement must admit it.
BLENDER_NUMPY = "1.24.3"

#: Distribution -> version, for what ``core/`` imports at run time and those packages'
#: runtime dependencies (numpy excepted: Blender ships it). Each has cp311 (or pure
#: ``py3-none-any``) wheels for all four platforms on PyPI.
WHEEL_PINS: dict[str, str] = {
    # scipy 1.16+ needs numpy >= 1.25.2, which Blender 4.2 and 4.3 lack; 1.15.3 is the last
    # release that runs on numpy 1.24.3 (its requirement: numpy >=1.23.5, <2.5).
    "scipy": "1.15.3",
    "tetgen": "0.8.4",  # core/mesh.tetrahedralize (pyvista is optional, not bundled)
    "meshio": "5.3.5",  # core/mesh .msh/.vtu/.vtk I/O
    "pyamg": "5.4.1",  # core/linsolve AMG-preconditioned CG (numpy >=1.23.5, scipy >=1.15)
    "rich": "15.0.0",  # meshio imports it
    "markdown-it-py": "4.3.0",  # rich
    "mdurl": "0.1.2",  # markdown-it-py
    "pygments": "2.21.0",  # rich
}

#: Blender platform -> ``pip download --platform`` tags, oldest OS each Blender 4.2 runs on
#: where the pinned wheels allow: glibc 2.28 on Linux (manylinux tags are not expanded by
#: pip, so they are listed down to 2.17), Windows 10 x64, macOS 11 on Intel (pip accepts
#: older macOS tags too). On Apple silicon scipy ships no macOS 11 wheel: that zip needs
#: macOS 12 or later.
PLATFORMS: dict[str, tuple[str, ...]] = {
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

# Already-compressed formats are stored, not deflated (as Blender does).
_STORED_SUFFIXES = (".whl", ".bz2", ".gz", ".lz4", ".lzma", ".rar", ".xz", ".zip", ".zst", ".7z")


def _glob_to_regex(pattern: str) -> str:
    """One path component's glob (``*``, ``?``, ``[...]``) as a regex that never crosses
    a separator (paths are matched with ``/`` turned into newlines)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            out.append("[^\n]*")
        elif c == "?":
            out.append("[^\n]")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append("\\[")
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                elif body.startswith("^"):
                    body = "\\" + body
                out.append(f"[{body}]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _pattern_to_regex(pattern: str) -> str:
    """One exclusion pattern as a regex over a path whose ``/`` are newlines."""
    if pattern.startswith("\\!"):
        pattern = pattern[1:]
    while "//" in pattern:
        pattern = pattern.replace("//", "/")
    # A leading or trailing "**" adds nothing: "**/x" is "x", "x/**" is "x/".
    while pattern.endswith(("/**/", "/**")):
        pattern = pattern[: -3 if pattern.endswith("/**/") else -2]
    while pattern.startswith(("/**/", "**/")):
        pattern = pattern[4 if pattern.startswith("/**/") else 3 :]
    while "/**/**/" in pattern:
        pattern = pattern.replace("/**/**/", "/**/")
    anchored = pattern.startswith("/")
    pattern = pattern.lstrip("/")
    dir_only = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    parts: list[str] = []
    glue_next = False
    for part in pattern.split("/"):
        if part == "**":
            # "a/**/b" matches a/b, a/x/b, a/x/y/b.
            parts[-1:] = [(parts[-1] if parts else "") + "(?:\n|\n(?s:.*)\n)?"]
            glue_next = True
            continue
        regex = _glob_to_regex(part)
        if glue_next and parts:
            parts[-1] += regex
        else:
            parts.append(regex)
        glue_next = False
    body = "\n".join(parts)
    head = "\\A" if anchored else "(?s:.*)^"  # unanchored: starts at any component
    tail = "[\n/]" if dir_only else "/?\\Z"  # a folder: itself and all inside it
    return head + body + tail


class PathPatterns:
    """Exclusion patterns, matched as Blender's extension builder matches them.

    A leading ``/`` anchors a pattern at the root, otherwise it matches from any path
    component on; a trailing ``/`` matches folders only (and so everything inside them);
    ``*`` and ``?`` stay within a component, ``**`` spans folders; a pattern starting
    with ``!`` re-includes what it matches, whatever the order.

    :meth:`excluded` takes a root-relative path with ``/`` separators, folders with a
    trailing ``/``.
    """

    def __init__(self, patterns: list[str]):
        self._rules: list[tuple[bool, re.Pattern[str]]] = []
        for raw in patterns:
            negate = raw.startswith("!")
            pattern = raw.lstrip("!") if negate else raw
            if pattern:
                self._rules.append((negate, re.compile(_pattern_to_regex(pattern), re.MULTILINE)))

    def excluded(self, path: str) -> bool:
        subject = path.rstrip("/").replace("/", "\n") + ("/" if path.endswith("/") else "")
        result = False
        for negate, regex in self._rules:
            if regex.match(subject):
                if negate:
                    return False
                result = True
        return result


def read_manifest(source: Path) -> dict:
    path = source / MANIFEST
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise SystemExit(f"error: no {MANIFEST} in {source}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SystemExit(f"error: {path} is not valid TOML: {exc}") from None


def collect_files(source: Path, manifest: dict) -> list[tuple[Path, str]]:
    """``(absolute path, archive name)`` of every file to zip, manifest first."""
    build = manifest.get("build") or {}
    if "paths" in build:
        names = [re.sub(r"^(?:\./)+", "", p.replace("//", "/")) for p in build["paths"]]
        files = [(source / MANIFEST, MANIFEST)]
        files += [(source / name, name) for name in names if name != MANIFEST]
        return files
    patterns = PathPatterns(build.get("paths_exclude_pattern", DEFAULT_EXCLUDE))
    files = [(source / MANIFEST, MANIFEST)]

    def walk(folder: Path, prefix: str) -> None:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if entry.is_symlink():
                continue
            rel = prefix + entry.name
            if entry.is_dir():
                if not patterns.excluded(rel + "/"):
                    walk(Path(entry.path), rel + "/")
            elif entry.is_file() and rel != MANIFEST and not patterns.excluded(rel):
                files.append((Path(entry.path), rel))

    walk(source, "")
    return files


# ---------------------------------------------------------------------------------------
# Wheels
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


# Blender's mapping of wheel platform tags to its platforms (blender_ext.py, used by
# `extension build --split-platforms`), mirrored so both pick the same wheels.
_WHEEL_SYSTEMS = {"macosx": "macos", "manylinux": "linux", "musllinux": "linux", "win": "windows"}
_WHEEL_MACHINES = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "aarch32": "arm32"}


def blender_platforms_of_wheel_tag(tag: str) -> list[str]:
    """Blender platforms a wheel platform tag serves (``win_amd64`` -> ``["windows-x64"]``,
    ``macosx_10_9_universal2`` -> both macOS ones; ``any`` -> all of :data:`PLATFORMS`)."""
    if tag == "any":
        return list(PLATFORMS)
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


def wheel_fits(filename: str, platform: str, python: str = PYTHON_VERSION) -> bool:
    """Whether the wheel file ``filename`` installs on Blender ``platform`` with Python
    ``python`` ("3.11"): its platform tag serves the platform and one of its Python tags
    is ``py3``, ``py311``, ``cp311``, or an ``abi3`` one of CPython 3.11 or older."""
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


def _find_wheels(wheel_dir: Path, platform: str) -> tuple[list[Path], list[str]]:
    """The pinned wheels for ``platform`` in ``wheel_dir`` and the pins that have none."""
    candidates: dict[str, Path] = {}
    for folder in (wheel_dir / platform, wheel_dir / "any", wheel_dir):
        if folder.is_dir():
            for path in sorted(folder.glob("*.whl")):
                candidates.setdefault(path.name, path)
    chosen, missing = [], []
    for name, version in WHEEL_PINS.items():
        found = []
        for filename, path in candidates.items():
            try:
                wheel_name, wheel_version = parse_wheel_filename(filename)[:2]
            except ValueError:
                continue
            if (wheel_name, wheel_version) == (normalize_name(name), version) and wheel_fits(
                filename, platform
            ):
                found.append(path)
        if not found:
            missing.append(f"{name} {version}")
        elif len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise SystemExit(
                f"error: {len(found)} {name} {version} wheels for {platform} in {wheel_dir} "
                f"({names}): delete all but one"
            )
        else:
            chosen.append(found[0])
    return sorted(chosen, key=lambda p: p.name), missing


def select_wheels(wheel_dir: Path, platform: str) -> list[Path]:
    """The wheel files of :data:`WHEEL_PINS` for Blender ``platform``, from
    ``wheel_dir/<platform>/``, ``wheel_dir/any/`` or ``wheel_dir`` itself.

    Files of other versions or other packages are ignored. Exits with a message naming
    what is missing when a pinned wheel is not there.
    """
    if platform not in PLATFORMS:
        raise SystemExit(f"error: unknown platform {platform!r}: use one of {', '.join(PLATFORMS)}")
    chosen, missing = _find_wheels(Path(wheel_dir), platform)
    if missing:
        raise SystemExit(
            f"error: no {platform} wheel for {', '.join(missing)} in {wheel_dir}: run "
            "`python scripts/build_extension.py --wheels` to download the pinned wheels"
        )
    return chosen


def download_wheels(
    wheel_dir: Path, platforms: Sequence[str] | None = None, pip: Sequence[str] | None = None
) -> None:
    """``pip download`` the wheels of :data:`WHEEL_PINS` for each Blender platform.

    Binary wheels go to ``wheel_dir/<platform>/``, pure-Python ones to ``wheel_dir/any/``
    (shared by all platforms). A platform whose pinned wheels are all there already is
    skipped, so a second run needs no network.

    Parameters
    ----------
    wheel_dir : Path
        The wheel folder (``wheels/`` of the source tree by default in :func:`main`).
    platforms : sequence of str or None
        Blender platforms; default all of :data:`PLATFORMS`.
    pip : sequence of str or None
        The pip command; default ``[sys.executable, "-m", "pip"]``.
    """
    wheel_dir = Path(wheel_dir).resolve()
    any_dir = wheel_dir / "any"
    pip = list(pip) if pip is not None else [sys.executable, "-m", "pip"]
    for platform in platforms or list(PLATFORMS):
        if platform not in PLATFORMS:
            raise SystemExit(
                f"error: unknown platform {platform!r}: use one of {', '.join(PLATFORMS)}"
            )
        if not _find_wheels(wheel_dir, platform)[1]:
            print(f"wheels: {platform}: all pinned wheels present")
            continue
        dest = wheel_dir / platform
        dest.mkdir(parents=True, exist_ok=True)
        cmd = [*pip, "download", "--only-binary=:all:", "--no-deps"]
        cmd += ["--python-version", PYTHON_VERSION, "--implementation", "cp"]
        for tag in PLATFORMS[platform]:
            cmd += ["--platform", tag]
        if any_dir.is_dir():  # pure wheels of an earlier platform, instead of the network
            cmd += ["--find-links", str(any_dir)]
        cmd += ["--dest", str(dest)]
        cmd += [f"{name}=={version}" for name, version in WHEEL_PINS.items()]
        print(f"wheels: {platform}: {' '.join(cmd)}", flush=True)
        proc = subprocess.run(cmd, check=False)
        if proc.returncode != 0:
            raise SystemExit(
                f"error: pip download for {platform} failed (exit code {proc.returncode}): see "
                "its output above; each pin in WHEEL_PINS needs a cp311 or py3 wheel for "
                f"{' or '.join(PLATFORMS[platform][:2])}"
            )
        for path in sorted(dest.glob("*.whl")):
            if parse_wheel_filename(path.name)[4] == "any":
                any_dir.mkdir(exist_ok=True)
                os.replace(path, any_dir / path.name)
        select_wheels(wheel_dir, platform)


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
            raise SystemExit(
                f"error: {path.name} has no single .dist-info/METADATA: re-download it"
            )
        metadata = email.parser.BytesParser().parsebytes(zf.read(names[0]), headersonly=True)
    return metadata.get_all("Requires-Dist") or []


def check_requirements(wheels: Sequence[Path], platform: str) -> list[str]:
    """What the bundled ``wheels`` need on ``platform`` and do not get, as messages.

    Every runtime requirement (``Requires-Dist`` without an unmet marker, extras left out)
    must be a pinned wheel whose version it admits, or numpy admitting
    :data:`BLENDER_NUMPY`. Empty where all is well, or where ``packaging`` is not there to
    read the requirements (then nothing is checked).
    """
    found = _packaging()
    if found is None:
        return []
    Requirement, default_environment = found
    env = default_environment()
    env.update(_MARKER_ENV[platform])
    env.update(
        python_version=PYTHON_VERSION,
        python_full_version=PYTHON_VERSION + ".0",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        extra="",
    )
    pinned = {normalize_name(n): v for n, v in WHEEL_PINS.items()}
    problems = []
    for path in wheels:
        for line in wheel_requirements(path):
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            name = normalize_name(req.name)
            have = BLENDER_NUMPY if name == "numpy" else pinned.get(name)
            where = "Blender's numpy" if name == "numpy" else f"WHEEL_PINS[{req.name!r}]"
            if have is None:
                problems.append(f"{path.name} needs {line!r}: add {req.name} to WHEEL_PINS")
            elif not req.specifier.contains(have, prereleases=True):
                problems.append(f"{path.name} needs {line!r}, but {where} is {have}")
    return problems


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", version)[:3])


def platform_manifest(text: str, platform: str, wheel_names: Sequence[str]) -> str:
    """The manifest text of the ``platform`` zip: ``platforms``, ``wheels`` (as
    ``./wheels/<name>``) and, when the source has none, ``blender_version_max`` put before
    the source manifest's own text (top-level keys go before any table)."""
    source = tomllib.loads(text)
    for key in ("platforms", "wheels"):
        if key in source:
            raise SystemExit(
                f'error: {MANIFEST} sets "{key}": remove it, the builder writes it for each '
                "platform zip from WHEEL_PINS and PLATFORMS"
            )
    lines = [
        f"# Added by scripts/build_extension.py: the {platform} build, with its wheels.",
        f'platforms = ["{platform}"]',
        "wheels = [",
        *(f'  "./wheels/{name}",' for name in wheel_names),
        "]",
    ]
    most = source.get("blender_version_max")
    if most is None:
        lines.append(f'blender_version_max = "{BLENDER_VERSION_MAX}"  # Python {PYTHON_VERSION}')
    elif _version_tuple(most) > _version_tuple(BLENDER_VERSION_MAX):
        raise SystemExit(
            f"error: {MANIFEST} allows Blender up to {most}, but the bundled wheels are for "
            f"Python {PYTHON_VERSION}, which Blender {BLENDER_VERSION_MAX} no longer runs: "
            f'lower blender_version_max to "{BLENDER_VERSION_MAX}" or build without wheels'
        )
    out = "\n".join(lines) + "\n\n" + text
    expected = dict(source, platforms=[platform], wheels=[f"./wheels/{n}" for n in wheel_names])
    expected.setdefault("blender_version_max", BLENDER_VERSION_MAX)
    assert tomllib.loads(out) == expected, "the generated manifest does not read back"
    return out


# ---------------------------------------------------------------------------------------
# Zips
# ---------------------------------------------------------------------------------------


def build(
    source: Path = ROOT,
    output: Path | None = None,
    output_dir: Path | None = None,
    *,
    platform: str | None = None,
    wheels: Sequence[Path] = (),
) -> Path:
    """Write the extension zip; returns its path.

    Parameters
    ----------
    source : Path
        The extension root (holds ``blender_manifest.toml`` and ``__init__.py``).
    output : Path or None
        The zip to write (for a platform build, ``-<platform>`` is added before ``.zip``,
        as Blender does); default ``<output_dir>/<id>-<version>[-<platform>].zip``, the
        platform spelt with ``_`` (``linux_x64``).
    output_dir : Path or None
        Default ``<source>/dist``.
    platform : str or None
        A Blender platform of :data:`PLATFORMS`: build that platform's zip, with
        ``wheels`` under ``wheels/`` and listed in its manifest. None: the plain,
        platform-independent zip (``wheels`` must be empty).
    wheels : sequence of Path
        The wheel files of a platform build (:func:`select_wheels`).
    """
    source = Path(source).resolve()
    manifest = read_manifest(source)
    for key in ("id", "version"):
        if not isinstance(manifest.get(key), str):
            raise SystemExit(f'error: {MANIFEST} has no "{key}" string')
    if platform is None and wheels:
        raise SystemExit("error: wheels go into a platform build: name the platform")
    files = collect_files(source, manifest)
    if manifest.get("type") == "add-on" and not any(
        name.startswith("__init__.") for _, name in files
    ):
        raise SystemExit('error: not a Python package: missing "__init__.py" at the root')
    suffix = f"-{platform.replace('-', '_')}" if platform else ""
    if output is None:
        output_dir = Path(output_dir) if output_dir is not None else source / "dist"
        output = output_dir / f"{manifest['id']}-{manifest['version']}{suffix}.zip"
    elif suffix:
        output = Path(output).with_name(Path(output).stem + suffix + Path(output).suffix)
    output = Path(output).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    manifest_data = None
    if platform is not None:
        wheels = [Path(w) for w in wheels]
        names = [w.name for w in wheels]
        if len(set(names)) != len(names):
            raise SystemExit(f"error: the same wheel file name twice in {names}")
        text = (source / MANIFEST).read_text(encoding="utf-8")
        manifest_data = platform_manifest(text, platform, names).encode("utf-8")
        # Blender's order: the manifest, the wheels, then the rest.
        files = [files[0], *((w, f"wheels/{w.name}") for w in wheels), *files[1:]]
    temp = output.with_name("." + output.name)
    try:
        with zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
            for path, name in files:
                stored = name.lower().endswith(_STORED_SUFFIXES)
                compress = zipfile.ZIP_STORED if stored else None
                if name == MANIFEST and manifest_data is not None:
                    zf.writestr(name, manifest_data, compress_type=compress)
                else:
                    zf.write(path, name, compress_type=compress)
        os.replace(temp, output)
    finally:
        if temp.exists():
            temp.unlink()
    return output


def build_platforms(
    source: Path = ROOT,
    wheel_dir: Path | None = None,
    platforms: Sequence[str] | None = None,
    *,
    download: bool = False,
    output: Path | None = None,
    output_dir: Path | None = None,
) -> list[Path]:
    """One zip per Blender platform, each with its pinned wheels (see :func:`build`).

    Parameters
    ----------
    source : Path
        The extension root.
    wheel_dir : Path or None
        Where the wheels are (:func:`select_wheels`); default ``<source>/wheels``.
    platforms : sequence of str or None
        Default all of :data:`PLATFORMS`.
    download : bool
        First :func:`download_wheels` what is missing (needs pip and the network).
    output, output_dir : Path or None
        As for :func:`build`.

    Returns
    -------
    list of Path
        The zips, in the order of ``platforms``.
    """
    source = Path(source).resolve()
    wheel_dir = Path(wheel_dir) if wheel_dir is not None else source / "wheels"
    platforms = list(platforms) if platforms else list(PLATFORMS)
    if download:
        download_wheels(wheel_dir, platforms)
    selected = {p: select_wheels(wheel_dir, p) for p in platforms}
    problems = [msg for p in platforms for msg in check_requirements(selected[p], p)]
    if problems:
        raise SystemExit(
            "error: the pinned wheels do not fit together:\n  " + "\n  ".join(problems)
        )
    return [
        build(source, output=output, output_dir=output_dir, platform=p, wheels=selected[p])
        for p in platforms
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source", type=Path, default=ROOT, help="extension root (default: this repository)"
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--output-dir", type=Path, help="folder for <id>-<version>.zip (default: <source>/dist)"
    )
    group.add_argument("--output", type=Path, help="the zip file to write")
    parser.add_argument(
        "--wheels",
        action="store_true",
        help="download the pinned wheels (pip, network) and build one zip per platform",
    )
    parser.add_argument(
        "--wheel-dir",
        type=Path,
        help="wheel folder (default: <source>/wheels); without --wheels, build the platform "
        "zips from the wheels already there, offline",
    )
    parser.add_argument(
        "--platform",
        action="append",
        choices=list(PLATFORMS),
        help="only this platform (repeatable; default: all)",
    )
    parser.add_argument("--list", action="store_true", help="print the archive's file names")
    args = parser.parse_args(argv)
    if args.wheels or args.wheel_dir is not None:
        outs = build_platforms(
            args.source,
            args.wheel_dir,
            args.platform,
            download=args.wheels,
            output=args.output,
            output_dir=args.output_dir,
        )
    elif args.platform:
        parser.error("--platform needs --wheels or --wheel-dir")
    else:
        outs = [build(args.source, output=args.output, output_dir=args.output_dir)]
    for out in outs:
        if args.list:
            with zipfile.ZipFile(out) as zf:
                for name in zf.namelist():
                    print(name)
        print(f"created: {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
