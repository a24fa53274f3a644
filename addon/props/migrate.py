"""Move the settings of a file saved before the stage groups into them.

Before layout 1 the FEM pipeline's fields sat flat on ``Object.neural_rom``
(``neural_rom["frames"]``); since, each lives in its stage group
(``neural_rom.bake["frames"]``, :data:`.stages.STAGES`). :func:`migrate_file` runs on every
file load (the load handler, :func:`..playback.on_load`) and at register for the file
already open. It moves the stored values as they are (an enum keeps the item index it was
stored as), so it changes no value, and it is idempotent: a moved file has no flat field
left. A flat value found beside a moved one wins, as the newer: a file saved by an older
Neural ROM after a newer one moved it.
"""

from __future__ import annotations

import bpy

from .object import LAYOUT_VERSION
from .stages import FIELD_STAGE


def _plain(value):
    """A stored value as a new ID property takes it (groups and collections as dicts)."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "to_list"):
        return value.to_list()
    if isinstance(value, list):  # a collection: a list of groups
        return [_plain(v) for v in value]
    return value


def migrate_object(obj) -> int:
    """Move ``obj``'s flat FEM settings into their stage groups and record the layout;
    returns how many fields moved (0 for an object already moved or never set up)."""
    settings = getattr(obj, "neural_rom", None)
    if settings is None:
        return 0
    stored = set(settings.keys())
    if not stored:
        return 0  # never set up: nothing stored, every field reads its default
    moved = 0
    for name, stage in FIELD_STAGE.items():
        if name not in stored:
            continue
        value = _plain(settings[name])
        group = getattr(settings, stage)
        if value == []:
            group.pop(name, None)  # an empty collection is the default
        else:
            group[name] = value
        del settings[name]
        moved += 1
    if settings.get("version") != LAYOUT_VERSION:
        settings["version"] = LAYOUT_VERSION
    return moved


def migrate_file() -> int:
    """Migrate every object of the open file (:func:`migrate_object`); returns the fields
    moved. Does nothing while Blender starts and ``bpy.data`` cannot be read yet."""
    try:
        objects = list(bpy.data.objects)
    except AttributeError:  # bpy.data is restricted while add-ons register at start-up
        return 0
    moved = 0
    for obj in objects:
        try:
            moved += migrate_object(obj)
        except Exception as e:  # noqa: BLE001 (one object must not stop the load handler)
            print(
                f"Neural ROM: the settings of '{obj.name}' were not moved ({e!r}); it reads "
                "its FEM settings as defaults: open the file it is saved in (a linked object's "
                "library) with Neural ROM enabled and save it"
            )
    return moved
