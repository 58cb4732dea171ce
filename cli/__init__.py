"""symshape: cli."""
