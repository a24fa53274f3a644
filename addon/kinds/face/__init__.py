"""Active faces in Blender: set-up, sliders and markers, their properties."""
