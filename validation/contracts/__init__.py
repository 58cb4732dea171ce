"""The library side of shape contracts: what the CLI (``symshape check``) and the server call.

:mod:`.contract` is one entry as data; :mod:`.pyexpr` parses the expressions
contracts are written in (FLOP formulas, output dims, valid regions);
:mod:`.verify` proves an entry's expectations on a loaded program, one module per
kind of expectation (:mod:`.valid`, :mod:`.expectations`, :mod:`.costs`) over the
facts of :mod:`.facts` and the Z3 points of :mod:`.points`; :mod:`.findings` holds
the verdicts.
"""
