"""Arguments the subcommands share, parsed without importing torch.

Bad values are argparse errors (one line, exit 2) before any heavy import.

>>> import argparse
>>> p = argparse.ArgumentParser()
>>> add_program_arguments(p)
>>> a = p.parse_args([f"{__file__}:target", "-i", "x: f32[B, 2*T]", "--dim", "B=1..8,T=4", "--arg", "causal=true",
...                   "--arg", "eps=1e-5", "--arg", "n=3"])
>>> a.dim, a.arg
({'B': (1, 8), 'T': 4}, {'causal': True, 'eps': 1e-05, 'n': 3})
"""
from __future__ import annotations

import argparse
import math
import os
import re

SPEC_HELP = """\
input specs (-i, one per tensor input, in the program's parameter order):
  "NAME: DTYPE[DIM, ...]"    e.g. -i "x: f32[B, T, 768]" -i "mask: bool[B, T]"
  NAME   the input's name; specs named after the program's parameters are
         passed by keyword (e.g. input_ids, attention_mask)
  DTYPE  f32 f16 bf16 f64 i64 i32 i16 i8 u8 bool c64 c128
  DIM    a name (B, seq_len): a symbolic size; one name is one size everywhere
         an integer (768): a static size
         an expression over names (2*T, T+1, H//2): a size derived from the
         named dims, e.g. "x: f32[B, 2*T]"; real inputs must agree with it
  in LO..HI  after an integer input: the values it holds, e.g.
         "attention_mask: i64[B, T] in 0..1" (positions counted from it then
         bound T); a run checks them
  --dim B=1..4096 bounds B (B=1.. has no upper bound); --dim B=8 sets the
  example size the trace runs at; several at once: --dim B=1..8,T=16.
  --arg NAME=VALUE passes a non-tensor argument by keyword: an int, a float,
  true/false, none, or else a string (e.g. --arg causal=true --arg eps=1e-5)."""

_BOUNDS = re.compile(r"^\s*(-?\d+)\s*(?:\.\.\s*(-?\d+|inf)?)?\s*$")
_NAMED = re.compile(r"^\s*([A-Za-z_]\w*)\s*=(.*)$", re.S)
_ARG = _NAMED


class BoundsError(ValueError):
    """A dim's bounds that do not parse (``malformed``) or are no sizes (an empty or negative range)."""

    def __init__(self, message: str, malformed: bool):
        super().__init__(message)
        self.malformed = malformed


def parse_bounds(text: str):
    """One dim's bounds, the one parser of ``--dim``, ``--world`` and contract ``dims``:
    ``"1..64"`` -> ``(1, 64)``, ``"1.."`` or ``"1..inf"`` -> ``(1, inf)``, ``"8"`` -> ``8``.

    >>> parse_bounds("1.."), parse_bounds(" 2..8 "), parse_bounds("8")
    ((1, inf), (2, 8), 8)
    >>> parse_bounds("9..2")
    Traceback (most recent call last):
    ...
    cli.args.BoundsError: empty or negative range
    """
    m = _BOUNDS.match(text)
    if not m:
        raise BoundsError("expected LO..HI (a range) or N (a size)", malformed=True)
    lo, hi = int(m.group(1)), m.group(2)
    if ".." not in text:
        if lo < 0:
            raise BoundsError("a size is a non-negative integer", malformed=False)
        return lo
    hi_v = math.inf if hi in (None, "inf") else int(hi)
    if lo < 0 or lo > hi_v:
        raise BoundsError("empty or negative range", malformed=False)
    return lo, hi_v


def parse_dim(text: str) -> dict:
    """``"B=1..4096,T=8"`` -> ``{"B": (1, 4096), "T": 8}`` (a single value is an example size).

    >>> parse_dim("B=1..,T=8")
    {'B': (1, inf), 'T': 8}
    """
    out = {}
    for part in text.split(","):
        if not part.strip():
            continue
        m = _NAMED.match(part)
        try:
            if not m:
                raise BoundsError("", malformed=True)
            out[m.group(1)] = parse_bounds(m.group(2))
        except BoundsError as e:
            why = "expected NAME=LO..HI (a range) or NAME=N (an example size)" if e.malformed else str(e)
            raise ValueError(f"bad --dim {part!r}: {why}") from None
    return out


def parse_arg(text: str) -> tuple:
    """``"NAME=VALUE"`` -> ``(NAME, value)``: an int, a float, true/false, none, or else the string.

    >>> parse_arg("causal=True"), parse_arg("scale=0.5"), parse_arg("mode=fast"), parse_arg("k=-2")
    (('causal', True), ('scale', 0.5), ('mode', 'fast'), ('k', -2))
    """
    m = _ARG.match(text)
    if not m:
        raise ValueError(f"bad --arg {text!r}: expected NAME=VALUE, e.g. --arg causal=true")
    name, raw = m.group(1), m.group(2).strip()
    low = raw.lower()
    if low in ("true", "false"):
        return name, low == "true"
    if low == "none":
        return name, None
    for kind in (int, float):
        try:
            return name, kind(raw)
        except ValueError:
            pass
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        raw = raw[1:-1]  # a quoted string: "--arg mode='3'" passes the string 3
    return name, raw


class _Merge(argparse.Action):
    """Repeatable option whose values merge into one dict; a name given twice is an error."""

    def __init__(self, option_strings, dest, parse, **kw):
        self.parse = parse
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            new = self.parse(values)
        except ValueError as e:
            raise argparse.ArgumentError(self, str(e)) from None
        if isinstance(new, tuple):
            new = dict([new])
        cur = dict(getattr(namespace, self.dest, None) or {})
        twice = sorted(set(cur) & set(new))
        if twice:
            raise argparse.ArgumentError(self, f"{', '.join(twice)} given twice")
        cur.update(new)
        setattr(namespace, self.dest, cur)


def target(text: str) -> str:
    """argparse type for ``FILE.py:NAME``: checked before anything heavy is imported.

    >>> target("README.md")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected FILE.py:NAME (for example examples/mlp.py:MLP), got 'README.md'
    """
    if ":" not in text:
        raise argparse.ArgumentTypeError(f"expected FILE.py:NAME (for example examples/mlp.py:MLP), got {text!r}")
    path, name = text.rsplit(":", 1)
    if not os.path.isfile(path):
        raise argparse.ArgumentTypeError(f"no such file: {path}")
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{name!r} is not a Python name (in {text!r})")
    return text


def add_program_arguments(p, example: str = "x: f32[B, T, 768]", dim_help: str = "dim range or example size"):
    """TARGET, ``-i SPEC``, ``--dim`` and ``--arg``: what names and calls the program."""
    p.add_argument("target", type=target, help="FILE.py:NAME (a function, an nn.Module instance or class)")
    p.add_argument("-i", "--input", action="append", required=True, metavar="SPEC",
                   help=f'input spec, one per tensor input, e.g. "{example}" (see below)')
    p.add_argument("--dim", action=_Merge, parse=parse_dim, default={}, metavar="NAME=LO..HI", help=dim_help)
    p.add_argument("--arg", action=_Merge, parse=parse_arg, default={}, metavar="NAME=VALUE",
                   help="a non-tensor argument passed by keyword (int, float, true/false, none, string)")
    p.add_argument("--world", type=parse_world, default=None, metavar="NAME=LO..HI",
                   help="trace torch.distributed against a symbolic world size NAME in LO..HI (one process, "
                        "no peers; see shapes.distributed)")
    p.add_argument("--mesh", type=parse_mesh, default=None, metavar="dp=D,tp=T",
                   help="a device mesh: each dim's size a name (its range by --dim D=1..2,T=1..4); the program "
                        "is a shapes.distributed.per_world factory taking the sizes by dim, traced per mesh shape")
    p.add_argument("--device", default=None, metavar="DEVICE",
                   help="the device the program will run on, which its tensors report while traced "
                        "(cpu or cuda; default cpu)")
    p.add_argument("--trace-timeout", type=positive_seconds, default=DEFAULT_TRACE_TIMEOUT, metavar="S",
                   help=f"stop when one trace runs longer than S seconds, e.g. a program that loops forever "
                        f"(default {DEFAULT_TRACE_TIMEOUT:g})")


#: Seconds one trace of the user's program may run (``--trace-timeout``), on every command that runs one.
DEFAULT_TRACE_TIMEOUT = 60.0


def positive_seconds(text: str) -> float:
    """argparse type: a positive number of seconds.

    >>> positive_seconds("2.5")
    2.5
    """
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return v


def parse_world(text: str) -> dict:
    """argparse type for ``--world W=1..8``: one name and its range (or example size).

    >>> parse_world("W=1..8")
    {'W': (1, 8)}
    >>> parse_world("W=1..8,T=4")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --world names one world size, e.g. --world W=1..8
    """
    try:
        d = parse_dim(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--dim", "--world")) from None
    if len(d) != 1:
        raise argparse.ArgumentTypeError("--world names one world size, e.g. --world W=1..8")
    return d


def parse_mesh(text: str) -> dict:
    """argparse type for ``--mesh dp=D,tp=T``: mesh dim -> the name of its size.

    >>> parse_mesh("dp=D,tp=T")
    {'dp': 'D', 'tp': 'T'}
    """
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        dim, eq, name = (x.strip() for x in part.partition("="))
        if not eq or not dim.isidentifier() or not name.isidentifier() or dim in out:
            raise argparse.ArgumentTypeError(f"bad --mesh item {part!r}: write dp=D,tp=T (mesh dim = size name)")
        out[dim] = name
    if not out:
        raise argparse.ArgumentTypeError("--mesh needs at least one dim, e.g. --mesh dp=D,tp=T")
    return out


def world_options(args) -> tuple:
    """``(dims, world)``: ``--dim`` with ``--world``'s range added, and the world's name (or None), or with
    ``--mesh`` the mesh (dim -> size name; the sizes' ranges are ``--dim``'s).

    >>> import argparse
    >>> world_options(argparse.Namespace(dim={"T": 4}, world={"W": (1, 8)}))
    ({'T': 4, 'W': (1, 8)}, 'W')
    >>> world_options(argparse.Namespace(dim={"D": (1, 2)}, world=None, mesh={"dp": "D"}))
    ({'D': (1, 2)}, {'dp': 'D'})
    """
    world = getattr(args, "world", None)
    mesh = getattr(args, "mesh", None)
    if mesh and world:
        raise argparse.ArgumentTypeError("give --world or --mesh, not both (a mesh's sizes multiply to the world's)")
    if mesh:
        return args.dim, mesh
    if not world:
        return args.dim, None
    (name, rng), = world.items()
    if name in args.dim:
        raise argparse.ArgumentTypeError(f"{name} is given by both --dim and --world")
    return {**args.dim, name: rng}, name


def add_progress_arguments(p):
    """``--progress`` / ``-q``: the status display on stderr (default: only on a terminal)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--progress", action="store_true", dest="progress",
                   help="show progress on stderr even when it is not a terminal")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress display on stderr")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1.

    >>> positive_int("3")
    3
    >>> positive_int("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be at least 1, got 0
    """
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


SUFFIX_FORMATS = {".html": "html", ".htm": "html", ".json": "json", ".txt": "text", ".text": "text"}


def output_format(given, path) -> str:
    """The report format: ``--format`` if given, else from ``-o``'s suffix, else text.

    Raises ValueError when ``--format`` contradicts the suffix.

    >>> output_format(None, "report.html"), output_format(None, "r.JSON"), output_format("json", None)
    ('html', 'json', 'json')
    >>> output_format(None, "r.pdf")
    Traceback (most recent call last):
    ...
    ValueError: -o r.pdf: unknown report suffix '.pdf'; use .txt, .json or .html (or --format)
    """
    suffix = os.path.splitext(path)[1].lower() if path else ""
    implied = SUFFIX_FORMATS.get(suffix) if path else None
    if path and not given and implied is None:
        # r.pdf or a suffix-less name would silently get text: say what is written instead.
        raise ValueError(f"-o {path}: unknown report suffix {suffix or '(none)'!r}; use .txt, .json or .html "
                         f"(or --format)")
    if given and implied and given != implied:
        raise ValueError(f"--format {given} but -o {path} has the suffix of a {implied} file; drop --format "
                         f"or give -o a matching suffix")
    return given or implied or "text"
