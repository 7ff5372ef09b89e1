"""``denpex explain``: explain a pasted traceback or log excerpt."""

from __future__ import annotations

import os
import sys

from denpex_tui.commands.common import EXIT_ERROR, EXIT_FOUND, EXIT_OK, UsageError, error, json_out

__all__ = ["cmd_explain"]


def _read_regular(path: str, limit: int) -> bytes:
    """The first ``limit`` bytes of a regular file. Opened without blocking and checked before
    reading, as ``scan`` does: a FIFO, a device or a socket is refused, never waited on."""
    import stat

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "a device")
            raise UsageError(f"{path}: not a regular file ({kind}): give a log file, or - for standard input")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            return fh.read(limit)
    finally:
        if fd >= 0:
            os.close(fd)


def cmd_explain(args, cfg) -> int:
    from denpex_tui.core.explain import explain_text

    src = args.file or "-"
    try:
        if src == "-":
            data = sys.stdin.buffer.read(4 << 20)
        else:
            data = _read_regular(src, 4 << 20)
    except OSError as exc:
        error(f"{src}: {exc.strerror or exc}")
        return EXIT_ERROR
    sig_dirs = list(cfg.get("scan", {}).get("signatures", [])) + list(args.signatures or [])
    exp = explain_text(data, signature_dirs=sig_dirs)
    if args.json:
        json_out(exp.to_json())
    else:
        from denpex_tui.render.explain_view import print_explanation
        from denpex_tui.render.report import make_console

        print_explanation(exp, make_console())
    return EXIT_OK if exp.known else EXIT_FOUND
