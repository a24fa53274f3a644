"""Surfaces and volumes: tet meshes, surface repair and sampling, the mesher, the voxel cage and
the embedding of a render mesh in it, winding numbers, grids."""
