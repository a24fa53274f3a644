"""``info``: each object's Neural ROM role and stages, as the sidebar shows them."""

from __future__ import annotations

import bpy

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
    for prop in settings.bl_rna.properties:
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
    if settings.role != "COLLIDER" and settings.training_data_kind() == "cloth":
        c = settings.cloth
        lines.append(
            f"cloth bake: {c.variants} variants of {c.frames} frames, seed {c.seed}, owner "
            f"{c.owner or '(auto: its top-most parent, or itself)'}"
        )
    face = getattr(settings, "face", None)
    if face is not None and face.path:
        lines.append(
            f"face: {face.path}, {face.tets} tets, skull {getattr(face.skull, 'name', '-')}, "
            f"jaw {getattr(face.jaw, 'name', '-')}, {face.keys} shape keys ({face.held_out} held "
            f"out), drive {face.drive.lower()} (the jaw by "
            f"{'the markers' if face.jaw_drive == 'MARKERS' else 'its keys'}), solve "
            f"{face.solve.lower()}"
        )
    if settings.role != "COLLIDER":
        method = settings.method()
        values = settings.method_values(method)
        if values:
            lines.append(
                f"{method.name} settings: " + ", ".join(f"{k}={v}" for k, v in values.items())
            )
    return lines
