"""The cloth bake job (``kind: "cloth_bake"``): Blender's cloth baked by the add-on's
``addon.clothbake`` in Blender itself (``--background``) or a Python with the PyPI ``bpy``."""

from __future__ import annotations

from ..errors import NeuralRomError
from ..registry.plugins import resolve


def run_cloth_bake(spec: dict) -> dict:
    """``kind: "cloth_bake"``: Blender's cloth baked to .nrbake files
    (``addon.clothbake.run``); this process must have ``bpy`` (Blender itself in
    ``--background``, or a Python with the PyPI ``bpy``)."""
    try:
        run = resolve("addon.kinds.cloth.bake_job:run")
    except ModuleNotFoundError as exc:
        if exc.name != "bpy":
            raise
        raise NeuralRomError(
            "the cloth bake runs in Blender itself (blender --background) or a Python with "
            "the bpy module; this job interpreter has no bpy"
        ) from exc
    return run(spec)
