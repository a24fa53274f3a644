"""What Neural ROM writes and reads: shared file helpers, bake caches, model files, tet-mesh files,
PC2 point caches, ONNX graphs."""
