"""What each data kind (fem, cloth, face) brings to core."""
