"""Build the installable extension zip, as ``blender --command extension build`` does.

Usage::

    python scripts/build_extension.py [--source DIR] [--output-dir DIR | --output FILE] [--list]

Writes ``dist/neural_rom-<version>.zip``: the manifest at the zip root, then every file of
the source tree that ``[build] paths_exclude_pattern`` in ``blender_manifest.toml`` does
not exclude (gitignore-like patterns, matched the way Blender's extension builder
matches them: see :class:`PathPatterns`). Symbolic links are skipped. Needs only the standard library,
so it runs without Blender (CI, a farm node).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tomllib
import zipfile
from pathlib import Path

MANIFEST = "blender_manifest.toml"
ROOT = Path(__file__).resolve().parent.parent

# Blender's default when a manifest has no [build] table.
DEFAULT_EXCLUDE = ["__pycache__/", ".*", "/*.zip"]

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


def build(source: Path = ROOT, output: Path | None = None, output_dir: Path | None = None) -> Path:
    """Write the extension zip; returns its path.

    Parameters
    ----------
    source : Path
        The extension root (holds ``blender_manifest.toml`` and ``__init__.py``).
    output : Path or None
        The zip to write; default ``<output_dir>/<id>-<version>.zip``.
    output_dir : Path or None
        Default ``<source>/dist``.
    """
    source = Path(source).resolve()
    manifest = read_manifest(source)
    for key in ("id", "version"):
        if not isinstance(manifest.get(key), str):
            raise SystemExit(f'error: {MANIFEST} has no "{key}" string')
    files = collect_files(source, manifest)
    if manifest.get("type") == "add-on" and not any(
        name.startswith("__init__.") for _, name in files
    ):
        raise SystemExit('error: not a Python package: missing "__init__.py" at the root')
    if output is None:
        output_dir = Path(output_dir) if output_dir is not None else source / "dist"
        output = output_dir / f"{manifest['id']}-{manifest['version']}.zip"
    output = Path(output).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    temp = output.with_name("." + output.name)
    try:
        with zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
            for path, name in files:
                stored = name.lower().endswith(_STORED_SUFFIXES)
                zf.write(path, name, compress_type=zipfile.ZIP_STORED if stored else None)
        os.replace(temp, output)
    finally:
        if temp.exists():
            temp.unlink()
    return output


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
    parser.add_argument("--list", action="store_true", help="print the archive's file names")
    args = parser.parse_args(argv)
    out = build(args.source, output=args.output, output_dir=args.output_dir)
    if args.list:
        with zipfile.ZipFile(out) as zf:
            for name in zf.namelist():
                print(name)
    print(f"created: {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
