"""symshape: the ``symshape`` and ``dinfer`` commands (see :mod:`cli.main`)."""

# Kept equal to pyproject.toml's version by tests/test_cli.py; read here because
# importlib.metadata costs a tenth of a second at startup.
__version__ = "0.1.0"
