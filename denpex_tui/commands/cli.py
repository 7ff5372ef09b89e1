"""The ``denpex`` command line.

Exit codes, every command: 0 ok / nothing found, 1 found something (an incident, an unknown
traceback for ``explain``), 2 usage or input error. Errors are one line on stderr, never a
traceback (``--debug`` writes details to a log file, never to the screen).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import tempfile
from pathlib import Path

from denpex_tui import __version__
from denpex_tui.commands import checklist, probe, watch
from denpex_tui.core import clock  # noqa: F401 (the process start, read before any fork)

log = logging.getLogger("denpex")
log.addHandler(logging.NullHandler())  # without --debug, log.exception must not reach stderr (logging.lastResort)

from denpex_tui.commands.common import EXIT_ERROR, EXIT_FOUND, EXIT_OK, UsageError  # noqa: F401 (re-used below)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _err(msg: str) -> None:
    from denpex_tui.core.text import safe_str

    print(f"denpex: {safe_str(msg)}", file=sys.stderr)


class _DebugFile(logging.FileHandler):
    """The --debug log. A write that fails (a full filesystem) is said once, in one line, and
    the debug log stops: never logging's '--- Logging error ---' traceback."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        exc = sys.exc_info()[1]
        why = getattr(exc, "strerror", None) or exc
        logging.getLogger().removeHandler(self)
        logging.getLogger("denpex").removeHandler(self)
        try:
            self.close()
        except OSError:
            pass
        _err(f"--debug {self.baseFilename}: cannot write ({why}); the debug log is off")


def _quiet_logging() -> None:
    """Nothing reaches the screen through logging: without --debug, records go nowhere (not to
    logging's last-resort handler, which printed the traceback of any internal error)."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())
    logging.raiseExceptions = False


def _setup_debug(target: str | None) -> None:
    if target is None:
        return
    from denpex_tui.core.config import state_dir

    path = Path(target) if target != "-auto-" else state_dir() / "debug.log"
    if path.is_dir():
        raise UsageError(f"--debug {path}: is a directory (give a file name, e.g. {path / 'denpex-debug.log'})")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = _DebugFile(path, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--debug {path}: {exc.strerror or exc}") from None
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()  # every library's warnings and errors go to the file too
    root.addHandler(handler)
    logging.getLogger("denpex").setLevel(logging.DEBUG)
    log.debug("denpex %s debug log started, argv=%r", __version__, sys.argv)


def _debug_before_command(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``denpex --debug scan X``: --debug's FILE is optional, so argparse took ``scan`` as the
    file. A command name right after --debug is the command; the log goes to the default file."""
    commands = {name for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices}
    out = list(argv)
    for i, a in enumerate(out):
        if a in commands:
            break
        if a == "--debug" and i + 1 < len(out) and out[i + 1] in commands:
            out[i] = "--debug=-auto-"
            break
    return out


_MAX_AGE_S = 200 * 365 * 86400


def _check_since(since: str | None) -> None:
    """An age beyond any log (``99999999999999d``) is refused in one line (the clock cannot go
    back that far: EOVERFLOW)."""
    if not since:
        return
    s = since.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if s[-1:] in units and s[:-1].isdigit() and (len(s) > 16 or int(s[:-1]) * units[s[-1]] > _MAX_AGE_S):
        raise UsageError(f"--since {since[:40]!r}: an age of at most 200 years (73000d)")


def _json_out(obj) -> None:
    from denpex_tui.core.text import safe_json

    sys.stdout.write(json.dumps(safe_json(obj), ensure_ascii=False) + "\n")


# -- scan ---------------------------------------------------------------------------------


def cmd_scan(args, cfg) -> int:
    from denpex_tui.core.scan import scan_paths

    sig_dirs = list(cfg.get("scan", {}).get("signatures", [])) + list(args.signatures or [])
    if args.follow:
        from denpex_tui.commands.follow import run_follow

        return run_follow(args, sig_dirs)
    paths = list(args.paths)
    tmp = None
    if args.demo:
        from denpex_tui.core.demo import write_demo_job

        tmp = tempfile.TemporaryDirectory(prefix="denpex-demo-")
        write_demo_job(tmp.name)
        paths = [tmp.name]
    if not paths:
        raise UsageError("scan needs at least one PATH (a log file, a directory or a glob), or --demo")
    _check_since(args.since)
    from denpex_tui.core.bundle_read import is_bundle  # an evidence bundle: its stored diagnosis

    try:
        bundle = len(paths) == 1 and is_bundle(paths[0], strict=True)
    except ValueError as exc:  # a bundle's document is untrusted: too big or too deep is refused
        if not os.path.isdir(paths[0]):
            raise UsageError(str(exc)) from None
        _err(f"warning: {exc}: the folder is scanned as logs")
        bundle = False
    if bundle:
        from denpex_tui.commands.checklist import scan_bundle

        return scan_bundle(paths[0], args)
    try:
        result = scan_paths(
            paths,
            signature_dirs=sig_dirs,
            jobs=args.jobs,
            rank=args.rank,
            attempt=args.attempt,
            since=args.since,
            io_timeout=args.io_timeout,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if result.readable_sources == 0:  # one line: what stopped it (the warnings say the same)
        _err(result.nothing_read(paths))
        return EXIT_ERROR
    for w in result.warnings:
        _err("warning: " + w)
    from denpex_tui.commands.checklist import scan_extras  # --control and the failure's rhythm

    extras = scan_extras(result, args)
    if args.json:
        _json_out({**result.to_json(), **extras.json})
    else:
        from denpex_tui.render.report import make_console, print_scan

        con = make_console()
        print_scan(result, con, verbose=args.verbose, measure=not args.no_measure)
        extras.print(con)
    if tmp is not None:
        tmp.cleanup()
    return EXIT_FOUND if result.incidents or result.job.unknown_lines() else EXIT_OK


# -- explain ------------------------------------------------------------------------------


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
        _err(f"{src}: {exc.strerror or exc}")
        return EXIT_ERROR
    sig_dirs = list(cfg.get("scan", {}).get("signatures", [])) + list(args.signatures or [])
    exp = explain_text(data, signature_dirs=sig_dirs)
    if args.json:
        _json_out(exp.to_json())
    else:
        from denpex_tui.render.explain_view import print_explanation
        from denpex_tui.render.report import make_console

        print_explanation(exp, make_console())
    return EXIT_OK if exp.known else EXIT_FOUND


# -- signatures ---------------------------------------------------------------------------


def cmd_signatures(args, cfg) -> int:
    from denpex_tui.core.catalog import load_catalog, load_pack

    if args.check:
        sigs, problems = load_pack(args.check)
        for s in sigs:
            if not any(e.match for e in s.examples) and not s.evidence_only:
                problems.append(_problem(s.path, "examples", "no matching example line: the pack cannot be tested"))
            for e in s.examples:
                from denpex_tui.core.lines.facts import parse_line

                got = s.matches(parse_line(e.line).text)
                if got != e.match:
                    problems.append(
                        _problem(s.path, "examples", f"line {'does not match' if e.match else 'matches'}: {e.line[:80]}")
                    )
        from denpex_tui.core.text import safe_str

        for p in problems:
            _err(f"signatures: {p}")
        print(f"{len(sigs)} signature(s) valid, {len(problems)} problem(s) in {safe_str(args.check)}")
        return EXIT_ERROR if problems or not sigs else EXIT_OK
    sig_dirs = list(cfg.get("scan", {}).get("signatures", [])) + list(args.signatures or [])
    cat = load_catalog(sig_dirs)
    for p in cat.problems:
        _err(f"signatures: {p}")
    if args.id:
        sig = cat.get(args.id)
        if sig is None:
            _err(f"no signature with id {args.id!r} (see 'denpex signatures')")
            return EXIT_ERROR
        if args.json:
            _json_out(sig.to_json())
        else:
            from denpex_tui.render.explain_view import print_signature
            from denpex_tui.render.report import make_console

            print_signature(sig, make_console())
        return EXIT_OK
    sigs = sorted(cat, key=lambda s: s.id)
    if args.json:
        _json_out({"schema": 1, "signatures": [s.to_json() for s in sigs]})
    else:
        from rich.text import Text

        from denpex_tui.render.report import make_console

        con = make_console()
        for s in sigs:
            t = Text(f"{s.id:<40} ")
            t.append(f"{s.role:<11}", style={"initiating": "red", "collateral": "yellow"}.get(s.role, "cyan"))
            t.append(f" {s.phase:<16} {s.title}")
            if not s.builtin:
                t.append(f"  [user pack: {s.pack}]", style="magenta")
            con.print(t)
        con.print(Text(f"{len(sigs)} signatures", style="dim"))
    return EXIT_OK


def _problem(path, field, message):
    from denpex_tui.core.catalog import CatalogProblem

    return CatalogProblem(path, field, message)


# -- parser -------------------------------------------------------------------------------


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


def _detached(fn) -> int:
    """Run ``fn`` in a forked child and return its exit code as soon as it has one.

    A thread blocked on a dead FUSE or NFS mount cannot be interrupted, and a process cannot
    finish exiting until all its threads have: the scan's watchdog gives up on such a file and
    prints its report, but the process would stay behind, holding the user's shell. The child
    hands its exit code back through a pipe, so this process exits at once and the child, if a
    mount holds it, finishes on its own (reaped by init)."""
    r, w = os.pipe()
    # The handlers are in place before the fork, with SIGTERM/SIGHUP held until the parent knows
    # the child's pid: a signal in the first instant kills the work too (it used to leave the
    # child and its pool workers reading on, and printing later).
    held = (signal.SIGTERM, signal.SIGHUP)
    child: dict[str, int] = {}

    def _end(sig, _frame) -> None:
        # `denpex scan SLOWDIR & kill -TERM $!`: the work dies with us; it must not print its
        # report to the shell later (SIGKILL: it may be blocked on a dead mount; its pool
        # workers die with it, core/scan.py _die_with_parent)
        pid = child.get("pid")
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)

    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    for sig in held:
        signal.signal(sig, _end)
    pid = os.fork()
    if pid == 0:  # child: do the work
        for sig in held:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        os.close(r)
        code = EXIT_ERROR
        try:
            code = fn()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os.write(w, bytes([int(code) & 0xFF]))
                # Close our ends of stdout/stderr now: a thread stuck on a dead mount keeps the
                # process (and its fd table) alive, and `denpex scan | jq` must still see EOF.
                for fd in (1, 2, w):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                os._exit(int(code))
    child["pid"] = pid
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # a held signal is handled now
    os.close(w)
    got = b""
    while True:
        try:
            got = os.read(r, 1)
            break
        except InterruptedError:
            continue
        except KeyboardInterrupt:  # the child got the same SIGINT; wait for its answer
            continue
    os.close(r)
    if got:
        import time

        for _ in range(40):  # reap it if it exits promptly (the usual case)
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
            time.sleep(0.025)
        return got[0]
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == -signal.SIGPIPE:  # `denpex scan ... | head` closed the pipe: a quiet end
        return EXIT_OK
    return code if code >= 0 else EXIT_ERROR


def _guarded(fn) -> int:
    """The command's own error handling, for work done in the detached child."""
    try:
        return fn()
    except UsageError as exc:
        _err(str(exc))
        return EXIT_ERROR
    except (KeyboardInterrupt, BrokenPipeError):
        return EXIT_OK
    except Exception as exc:  # never a traceback on screen
        log.exception("unexpected error")
        _err(f"internal error: {type(exc).__name__}: {exc} (run with --debug for details)")
        return EXIT_ERROR


def _tolerant_streams() -> None:
    """Text is escaped before it is written; an encoding that still cannot hold a character
    (an ASCII locale) writes it as ``\\u2026`` instead of failing the command."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _tolerant_streams()
    _quiet_logging()
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `denpex scan ... | head` ends quietly
    except (AttributeError, ValueError):
        pass
    parser = build_parser()
    argv = _debug_before_command(argv, parser)
    try:
        args = parser.parse_args(argv)
        _setup_debug(args.debug)
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
            _err(w)
        if (getattr(args, "detach", False) or (args.func is cmd_scan and not args.follow)) and hasattr(os, "fork"):
            return _detached(lambda: _guarded(lambda: int(args.func(args, cfg))))
        return int(args.func(args, cfg))
    except UsageError as exc:
        _err(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # never a traceback on screen
        log.exception("unexpected error")
        _err(f"internal error: {type(exc).__name__}: {exc} (run with --debug for details)")
        return EXIT_ERROR
