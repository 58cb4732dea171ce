# The serve package needs the `serve` extra; without it its doctests are not collected.
import importlib.util

collect_ignore_glob = [] if all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn")) else ["*.py"]
