"""The operators of the data kinds (cloth, face) and of model families."""
