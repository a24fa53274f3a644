"""Blender in and out: evaluated meshes and their sampling over frames, animation, the cache
folder's paths, exports (PC2, Alembic, ONNX)."""
