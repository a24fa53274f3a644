"""FEM bodies in Blender: tetrahedralize, bake (and bake playback), the tet preview."""
