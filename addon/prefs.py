"""Add-on preferences: the Python interpreter for jobs, the default cache directory, the device.

The extension never installs packages: the interpreter used for jobs is the one the user
points at (default: the Python running Blender), and the Check button reports what it has.
"""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace

import bpy
from bpy.props import EnumProperty, StringProperty

from ..core.jobs import PYTHON_ENV, default_python

#: ``options`` of every path property: paths may be "//"-relative to the .blend; Blender
#: 4.5+ warns unless the property says so.
REL_PATH = {"PATH_SUPPORTS_BLEND_RELATIVE"} if bpy.app.version >= (4, 5, 0) else set()

# addon/prefs.py -> the extension's root package, whatever Blender names it
# ("neural_rom" in development, "bl_ext.<repo>.neural_rom" when installed).
ADDON_PACKAGE = __package__.rpartition(".")[0]

DEFAULT_CACHE_DIR = "//neural_rom/"

DEVICE_ITEMS = (
    ("AUTO", "Auto", "CUDA when the job interpreter has it, else CPU"),
    ("CPU", "CPU", "Always train on the CPU"),
    ("CUDA", "CUDA", "Train on the NVIDIA GPU; fail when CUDA is missing"),
)


class NEURAL_ROM_AP_preferences(bpy.types.AddonPreferences):
    bl_idname = ADDON_PACKAGE

    python_path: StringProperty(
        name="Job Python",
        subtype="FILE_PATH",
        options=REL_PATH,
        default="",
        description="Python interpreter that runs bake and training jobs; empty uses "
        f"${PYTHON_ENV} when set, else the Python running Blender",
    )
    cache_dir: StringProperty(
        name="Default Cache Directory",
        subtype="DIR_PATH",
        options=REL_PATH,
        default=DEFAULT_CACHE_DIR,
        description="Where tets, bakes and models go (// is the folder of the .blend file)",
    )
    device: EnumProperty(name="Training Device", items=DEVICE_ITEMS, default="AUTO")
    last_check: StringProperty(
        name="Last Check", description="Result of the last interpreter check"
    )

    def draw(self, context) -> None:
        draw_preferences(self.layout, self)


def draw_preferences(layout, prefs) -> None:
    col = layout.column()
    row = col.row(align=True)
    row.prop(prefs, "python_path")
    row.operator("neural_rom.check_interpreter", text="Check", icon="CHECKMARK")
    if not prefs.python_path:
        python = default_python()
        where = f"${PYTHON_ENV}" if os.environ.get(PYTHON_ENV) else "Blender's Python"
        col.label(text=f"Using {where}: {python}", icon="INFO")
    for line in (prefs.last_check or "").splitlines():
        col.label(text=line)
    col.separator()
    col.prop(prefs, "cache_dir")
    col.prop(prefs, "device")
    col.label(
        text="Neural ROM never installs packages: install numpy, scipy (and torch to train) in the job Python."
    )


def get_preferences(context=None):
    """The add-on preferences, or an object with the default values when the add-on is
    registered without being enabled through the preferences (tests, scripts)."""
    context = context or bpy.context
    addon = context.preferences.addons.get(ADDON_PACKAGE)
    if addon is not None and addon.preferences is not None:
        return addon.preferences
    return SimpleNamespace(
        python_path="", cache_dir=DEFAULT_CACHE_DIR, device="AUTO", last_check=""
    )


#: The command line's ``--python`` while a command runs (:func:`job_python_override`).
_OVERRIDE: list[str] = []


def job_python(context=None) -> str:
    """Absolute path of the interpreter jobs run with: the command line's ``--python``, else
    the preferences' Job Python, else ``$NEURAL_ROM_PYTHON``, else Blender's own Python."""
    if _OVERRIDE:
        return os.path.abspath(_OVERRIDE[-1])
    path = get_preferences(context).python_path
    return bpy.path.abspath(path) if path else default_python()


@contextlib.contextmanager
def job_python_override(path: str | None):
    """Run the jobs started inside with the interpreter ``path`` (None: no change)."""
    if not path:
        yield
        return
    _OVERRIDE.append(path)
    try:
        yield
    finally:
        _OVERRIDE.pop()


CLASSES = (NEURAL_ROM_AP_preferences,)
