"""``symshape serve [--host 127.0.0.1] [--port 8765] [--root DIR]``: answer shape questions over HTTP.

Serving executes the named code: every request names a Python file under
a project root, and the server's worker processes import and run it.  The
server binds to 127.0.0.1 unless told otherwise, and binding to any other
address requires ``--token`` (clients then send ``Authorization: Bearer
TOKEN``).

Example::

    symshape serve --root examples        # then open http://127.0.0.1:8765/
"""
from __future__ import annotations

import ipaddress
import os

from ..loader import CliError


def register(sub):
    p = sub.add_parser("serve", help="serve shape questions over HTTP (JSON API + web page); runs the named code",
                       description="Answer shape questions over HTTP: trace, explain, dinfer, flops, check, "
                                   "classify and a web page.  Serving EXECUTES the programs requests name (in "
                                   "worker processes with a timeout and a memory limit).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; others need --token)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--root", action="append", metavar="DIR",
                   help="project root programs may be loaded from (repeatable; default: the current folder)")
    p.add_argument("--token", default=os.environ.get("SYMSHAPE_TOKEN"),
                   help="bearer token required on /api/ (default: $SYMSHAPE_TOKEN); required off loopback")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a request may run (default 60)")
    p.add_argument("--memory-mb", type=int, default=4096,
                   help="memory a worker may add beyond torch's own, in MiB (default 4096; 0: no limit)")
    p.set_defaults(run=run)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args) -> int:
    if not _loopback(args.host) and not args.token:
        raise CliError(f"refusing to bind {args.host} without --token: the server runs the code requests name; "
                       f"give --token SECRET (clients send Authorization: Bearer SECRET) or bind 127.0.0.1")
    if args.token is not None and len(args.token) < 8:
        raise CliError("--token must be at least 8 characters")
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port {args.port} is not a port number")
    if args.workers < 1 or args.timeout <= 0 or args.memory_mb < 0:
        raise CliError("--workers must be >= 1, --timeout > 0 and --memory-mb >= 0")
    try:
        import uvicorn

        from .app import create_app
    except ModuleNotFoundError as e:
        raise CliError(f"symshape serve needs the serve extra ({e.name} is missing): "
                       f"pip install 'symshape[serve]'") from None
    import socket
    roots = args.root or ["."]
    app = create_app(roots=roots, workers=args.workers, timeout=args.timeout, memory_mb=args.memory_mb,
                     token=args.token)
    # Bind first so that --port 0 can print the port it got before serving.
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as e:
        raise CliError(f"cannot bind {args.host}:{args.port}: {e.strerror}") from None
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"symshape serve: http://{shown}:{port}/ (roots: {', '.join(app.state.roots)}); "
          f"this server runs the programs requests name", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        app.state.pool.close()
    return 0
