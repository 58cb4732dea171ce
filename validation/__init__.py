"""symshape: validation."""
from .dinfer import dinfer  # noqa: E402,F401  (dinfer: enumerate a program's valid input shapes)
