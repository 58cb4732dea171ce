"""symshape: compiler."""
