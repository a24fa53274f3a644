"""``info``: each object's Neural ROM role and stages, as the sidebar shows them."""

from __future__ import annotations

import bpy

from . import kinds
from .common import EXIT_OK, file_label, is_deformable, say, select_objects


def add_parser(sub, common) -> None:
    sub.add_parser(
        "info",
        parents=[common],
        help="print each object's Neural ROM stages",
        description="Print the Neural ROM role and stage state (tets, bakes) of the objects.",
    )


def run(args) -> int:
    names = args.objects
    objects = select_objects(names) if names else list(bpy.data.objects)
    say(f"file: {file_label()}")
    for obj in objects:
        role = getattr(getattr(obj, "neural_rom", None), "role", "n/a")
        print(f"{obj.name} ({obj.type}) role: {role}")
        if is_deformable(obj) or names:
            for line in _describe(obj):
                if not line.startswith("role:"):
                    print(f"    {line}")
    return EXIT_OK


def _describe(obj) -> list[str]:
    """``key: value`` lines of the object's Neural ROM properties that are set and apply to
    it (:meth:`.props.NEURAL_ROM_PG_object.applies`: no FEM settings for a cloth or a face,
    a collider's only for a collider); hidden bookkeeping (a job in flight, the method's
    name behind the menu) is left out."""
    settings = getattr(obj, "neural_rom", None)
    if settings is None:
        return []
    lines = []
    for prop in settings.flat_properties():
        key = prop.identifier
        if key in ("rna_type", "name") or prop.is_hidden or not settings.applies(key):
            continue
        try:
            value = getattr(settings, key)
        except AttributeError:
            continue
        if prop.type == "COLLECTION":
            items = list(value)
            if items:
                names = ", ".join(getattr(i, "name", "") or str(n) for n, i in enumerate(items))
                lines.append(f"{key}: {len(items)} ({names})")
            continue
        if prop.type == "POINTER":
            continue
        if hasattr(value, "__len__") and not isinstance(value, str):
            value = tuple(value)
        if value in ("", None):
            continue
        lines.append(f"{key}: {value}")
    describe_kind = kinds.hook(settings.training_data_kind(), "describe")
    if describe_kind is not None:
        lines += describe_kind(obj)
    if settings.role != "COLLIDER":
        method = settings.method()
        values = settings.method_values(method)
        if values:
            lines.append(
                f"{method.name} settings: " + ", ".join(f"{k}={v}" for k, v in values.items())
            )
    return lines
