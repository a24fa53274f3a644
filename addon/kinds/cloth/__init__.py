"""Cloth in Blender: the cloth model's object side and the background cloth bake job."""
