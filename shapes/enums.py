"""The base of symshape's kinds and statuses: enums whose text is their value.

Every field named ``kind`` or ``status`` holds one of these rather than a bare
string (``tests/test_architecture.py`` rejects ``x.kind == "..."``): a typo is
then an AttributeError at import, not a comparison that is silently False.
They are ``str`` too, so JSON reports and f-strings keep writing the value.

Example::

    >>> class Color(TextEnum):
    ...     RED = "red"
    >>> Color("red") is Color.RED, f"{Color.RED}", Color.RED == "red", {"red": 1}[Color.RED]
    (True, 'red', True, 1)
"""
from __future__ import annotations

import enum


class TextEnum(str, enum.Enum):
    """A ``str`` enum whose ``str()`` and format are its value."""

    def __str__(self) -> str:
        return self.value

    # Equal to its value as a str, so it must hash as one: a dict keyed by the text finds it.
    def __hash__(self) -> int:
        return str.__hash__(self)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
