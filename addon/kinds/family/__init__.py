"""Shape families in Blender: variants of one body and the reference (rest) mesh."""
