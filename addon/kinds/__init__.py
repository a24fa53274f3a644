"""The Blender half of each data kind: fem (tets, bake, preview), cloth, face, family."""
