"""Where an object's files live: the cache directory (scene setting, else preferences,
default ``//neural_rom/`` next to the .blend) and how paths are kept on objects
(Blender-relative when the cache directory is, so a project folder moves intact).
"""

from __future__ import annotations

import functools
import os
import uuid
from pathlib import Path

import bpy

from ...core.errors import NeuralRomError
from ..prefs import DEFAULT_CACHE_DIR, get_preferences


def scene_of(obj: bpy.types.Object) -> bpy.types.Scene:
    """The scene ``obj`` is in (the context's when it is in none)."""
    scenes = obj.users_scene
    return scenes[0] if scenes else bpy.context.scene


def cache_base(scene: bpy.types.Scene | None = None) -> str:
    """The cache directory setting in effect (scene setting, else preferences), unexpanded."""
    scene = scene or bpy.context.scene
    base = scene.neural_rom_scene.cache_dir if scene is not None else ""
    return base or get_preferences().cache_dir or DEFAULT_CACHE_DIR


def _is_relative(base: str) -> bool:
    return base.startswith("//")


def cache_dir(obj: bpy.types.Object, *, create: bool = True) -> Path:
    """Absolute cache directory of ``obj`` (``<cache dir>/<object name>/``), created and
    checked writable when ``create``.

    Raises
    ------
    NeuralRomError
        The .blend is unsaved and the cache directory is relative to it, or the
        directory cannot be created or written.
    """
    base = cache_base(scene_of(obj))
    if _is_relative(base) and not bpy.data.filepath:
        raise NeuralRomError(
            f"Save the .blend file first: the cache directory '{base}' is relative to it. "
            "Or set an absolute Cache Directory in the Neural ROM panel or the add-on preferences."
        )
    path = Path(bpy.path.abspath(base)) / bpy.path.clean_name(obj.name)
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".write-test-{uuid.uuid4().hex[:8]}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise NeuralRomError(
                f"Cannot write to the cache directory {path} ({e.strerror or e}). "
                "Pick a writable Cache Directory in the Neural ROM panel or the add-on preferences."
            ) from e
    return path


def store_path(obj: bpy.types.Object, path: str | os.PathLike) -> str:
    """How a path is kept on the object: Blender-relative when the cache directory is."""
    path = os.fspath(path)
    if _is_relative(cache_base(scene_of(obj))) and bpy.data.filepath:
        try:
            return bpy.path.relpath(path)
        except ValueError:  # another drive on Windows
            return path
    return path


def load_path(path: str) -> Path:
    """Absolute path of a stored (possibly ``//``-relative) path."""
    # the frame handler asks it of every simulated object every frame: 4 -> 1 us kept
    return _absolute(path, bpy.data.filepath)


@functools.lru_cache(maxsize=256)
def _absolute(path: str, blend: str) -> Path:
    """:func:`load_path` of ``path`` relative to the .blend file ``blend`` (what
    ``bpy.path.abspath`` reads)."""
    return Path(bpy.path.abspath(path))
