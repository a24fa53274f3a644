"""Cloth: a Blender cloth bake read as training data."""
