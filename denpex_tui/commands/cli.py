"""The ``denpex`` command line: the parser, and ``main``.

Exit codes, every command: 0 ok / nothing found, 1 found something (an incident, an unknown
traceback for ``explain``), 2 usage or input error. Errors are one line on stderr, never a
traceback (``--debug`` writes details to a log file, never to the screen; commands/process.py).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys

from denpex_tui import __version__
from denpex_tui.commands import checklist, probe, watch
from denpex_tui.commands.common import EXIT_ERROR, EXIT_OK, UsageError, error
from denpex_tui.commands.explain import cmd_explain
from denpex_tui.commands.process import (
    debug_before_command,
    detached,
    guarded,
    log,
    quiet_logging,
    setup_debug,
    tolerant_streams,
)
from denpex_tui.commands.scan import cmd_scan
from denpex_tui.commands.signatures import cmd_signatures
from denpex_tui.core import clock  # noqa: F401 (the process start, read before any fork)

__all__ = ["main", "build_parser", "log"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="denpex",
        description="Live triage of distributed ML training logs: which rank failed first, why, and how to prove the fix.",
    )
    p.add_argument("--version", action="version", version=f"denpex {__version__}")
    p.add_argument(
        "--debug",
        nargs="?",
        const="-auto-",
        metavar="FILE",
        help="write a debug log to FILE (default: $XDG_STATE_HOME/denpex/debug.log); never to the screen",
    )
    p.add_argument(
        "--log-line-prefix-template",
        metavar="T",
        default=os.environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE") or None,
        help="the torchrun --log-line-prefix-template the job used (${role_name}, ${rank}, ${local_rank}, "
        "${hostname}); default: $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    s = sub.add_parser("scan", help="triage the logs of a job (finished or running)")
    s.add_argument("paths", nargs="*", metavar="PATH", help="log files, directories or globs (one job)")
    s.add_argument("--json", action="store_true", help="one JSON object (schema 1); with --follow: JSON Lines events")
    s.add_argument("--rank", type=int, help="only this global rank's findings")
    s.add_argument("--attempt", type=int, help="only this attempt (torchrun attempt_N)")
    s.add_argument("--since", metavar="T", help="only findings at or after T (ISO time, or an age: 30m, 2h)")
    s.add_argument("--signatures", action="append", metavar="DIR", help="extra signature pack (repeatable)")
    s.add_argument("--follow", "-f", action="store_true", help="keep following the logs until interrupted")
    s.add_argument("--exec", dest="exec_cmds", action="append", metavar="[RANK=]CMD",
                   help="with --follow: read a command's output as a log (repeatable), e.g. 3='kubectl logs -f pod-3'")
    s.add_argument("--jobs", "-j", type=int, help="processes for the history scan (default: all cores)")
    s.add_argument("--max-stat-rate", type=float, default=500.0, metavar="N",
                   help="with --follow: cap on stat/open calls per second while polling (protects a Lustre "
                        "MDS; 1024 files need ~2000 for ~1 s latency without inotify); default 500")
    s.add_argument("--max-files", type=int, default=10000, metavar="N",
                   help="with --follow: files followed at most (default 10000); deleted files in their grace period do not "
                        "count, a newer attempt's files replace an older attempt's, the rest are counted and named")
    s.add_argument("--demo", action="store_true", help="scan the built-in demo job")
    s.add_argument("--io-timeout", type=float, default=60.0, metavar="S",
                   help="give up on a read or a directory listing that does not answer in S seconds (hung mount); default 60")
    s.add_argument("--verbose", "-v", action="store_true", help="also list warning-level findings")
    s.add_argument("--no-measure", action="store_true",
                   help="do not measure the failing path and local processes now (the ENOSPC/EMFILE differential)")
    checklist.add_scan_options(s)  # --control, --runs
    s.set_defaults(func=cmd_scan)

    e = sub.add_parser("explain", help="explain a pasted traceback or log excerpt")
    e.add_argument("file", nargs="?", metavar="FILE|-", help="file to read, or - for standard input (default)")
    e.add_argument("--json", action="store_true")
    e.add_argument("--signatures", action="append", metavar="DIR")
    e.set_defaults(func=cmd_explain)

    g = sub.add_parser("signatures", help="list or show the signature catalog, or lint a pack")
    g.add_argument("id", nargs="?", metavar="ID")
    g.add_argument("--json", action="store_true")
    g.add_argument("--check", metavar="DIR", help="validate a signature pack and run its example lines")
    g.add_argument("--signatures", action="append", metavar="DIR")
    g.set_defaults(func=cmd_signatures)

    probe.add_parser(sub)
    # detached like scan: a path the logs name may be on a dead mount, and a thread stuck
    # there in D state would keep the process (and the user's shell) from exiting on SIGTERM
    sub.choices["probe"].set_defaults(func=lambda a, _cfg: probe.run(a), detach=True)
    checklist.add_parsers(sub)  # checkpoints, footprint, verify, evidence: the checklist items as commands
    watch.add_parser(sub)  # a watch that cannot be imported is an error, never a missing command
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tolerant_streams()
    quiet_logging()
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `denpex scan ... | head` ends quietly
    except (AttributeError, ValueError):
        pass
    parser = build_parser()
    argv = debug_before_command(argv, parser)
    try:
        args = parser.parse_args(argv)
        setup_debug(args.debug)
        if args.log_line_prefix_template:
            from denpex_tui.core.lines.formats import set_prefix_template

            try:
                set_prefix_template(args.log_line_prefix_template)
            except (ValueError, re.error) as exc:
                raise UsageError(f"--log-line-prefix-template: {exc}") from None
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_ERROR
        from denpex_tui.core.config import load_config

        cfg, warnings = load_config()
        for w in warnings:
            error(w)
        if (getattr(args, "detach", False) or (args.func is cmd_scan and not args.follow)) and hasattr(os, "fork"):
            return detached(lambda: guarded(lambda: int(args.func(args, cfg))))
        return int(args.func(args, cfg))
    except UsageError as exc:
        error(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # never a traceback on screen
        log.exception("unexpected error")
        error(f"internal error: {type(exc).__name__}: {exc} (run with --debug for details)")
        return EXIT_ERROR
