"""What every command shares: exit codes, the two errors a command reports as one line, and the
ways it writes (JSON, the console, a warning)."""

from __future__ import annotations

import json
import sys

__all__ = ["EXIT_OK", "EXIT_FOUND", "EXIT_ERROR", "UsageError", "InputError", "json_out", "console", "warn", "error"]

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2  # nothing found, something found, a usage or input error


class UsageError(Exception):
    """The command line is wrong: one line on stderr, exit 2."""


class InputError(Exception):
    """Bad input (a path, a bundle, a pack): one line on stderr, exit 2."""


def json_out(obj) -> None:
    from denpex_tui.core.text import safe_json

    sys.stdout.write(json.dumps(safe_json(obj), ensure_ascii=False) + "\n")


def console():
    from denpex_tui.render.report import make_console

    return make_console()


def warn(msg: str) -> None:
    from denpex_tui.core.text import safe_str

    print(f"denpex: warning: {safe_str(msg)}", file=sys.stderr)


def error(msg: str) -> None:
    """A command's one-line error on stderr (the text made safe)."""
    from denpex_tui.core.text import safe_str

    print(f"denpex: {safe_str(msg)}", file=sys.stderr)
