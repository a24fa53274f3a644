"""The sidebar boxes of the data kinds (cloth, face) and of model families."""
