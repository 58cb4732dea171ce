"""The library side of shape contracts: what the CLI (``symshape check``) and the server call.

:mod:`.pyexpr` parses the expressions contracts are written in (FLOP formulas,
output dims, valid regions) into engine expressions.
"""
