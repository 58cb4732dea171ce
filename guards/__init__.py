"""symshape: guards."""
