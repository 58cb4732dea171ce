"""symshape: tests."""
