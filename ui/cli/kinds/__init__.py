"""The command-line commands of the data kinds (cloth, face)."""
