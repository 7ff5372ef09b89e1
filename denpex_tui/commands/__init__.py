"""Every command-line entry of Denpex: ``denpex scan|explain|signatures|probe|watch|checkpoints|
footprint|verify|evidence``. The top layer: it may use every other one, and nothing imports it."""

from __future__ import annotations

__all__ = ["main", "entry"]


def main(argv: list[str] | None = None) -> int:
    from .cli import main as _main

    return _main(argv)


def entry() -> None:
    """The program (``denpex``, ``python -m denpex_tui``): ``main``, then an exit that skips the
    interpreter's finalization. Daemon threads (the history pass, a read stuck on a dead mount)
    may be inside compiled code then; a thread of a pybind11 module (RE2) that wakes during
    finalization aborts the process ("terminate called without an active exception", exit
    -6) after its output was complete. The exit handlers run first (``--exec`` commands
    stopped, spools removed) and both streams are flushed."""
    import atexit
    import os
    import sys

    code: object = 1
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help and usage errors
        code = 0 if exc.code is None else exc.code
        if not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    finally:
        try:
            atexit._run_exitfuncs()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):  # a closed pipe: nothing more can be said there
                    pass
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)
