"""bpy Panels and UI lists (View3D > Sidebar > Neural ROM)."""

from . import sidebar

CLASSES = (*sidebar.CLASSES,)
