"""symshape: validation."""
