"""The command-line commands of the data kinds (face)."""
