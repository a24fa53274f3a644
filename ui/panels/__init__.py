"""bpy Panels and UI lists (View3D > Sidebar > Neural ROM)."""

from . import face, sidebar

CLASSES = (*sidebar.CLASSES, *face.CLASSES)
