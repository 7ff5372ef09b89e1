"""How a ``denpex`` command runs as a process: nothing reaches the screen through logging, the
``--debug`` log goes to a file, a command that may touch a dead mount runs in a forked child
whose exit code is handed back at once (``detached``), and the streams never fail on an
encoding.  Errors are one line (``guarded``), never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from denpex_tui import __version__
from denpex_tui.commands.common import EXIT_ERROR, EXIT_OK, UsageError, error

__all__ = ["log", "quiet_logging", "setup_debug", "debug_before_command", "detached", "guarded", "tolerant_streams"]

log = logging.getLogger("denpex")
log.addHandler(logging.NullHandler())  # without --debug, log.exception must not reach stderr (logging.lastResort)


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
        error(f"--debug {self.baseFilename}: cannot write ({why}); the debug log is off")


def quiet_logging() -> None:
    """Nothing reaches the screen through logging: without --debug, records go nowhere (not to
    logging's last-resort handler, which printed the traceback of any internal error)."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())
    logging.raiseExceptions = False


def setup_debug(target: str | None) -> None:
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


def debug_before_command(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
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


def detached(fn) -> int:
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
        _child(fn, held, old_mask, r, w)
    child["pid"] = pid
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # a held signal is handled now
    return _wait_child(pid, r, w)


def _child(fn, held, old_mask, r: int, w: int) -> None:
    """In the forked child: run ``fn``, write its exit code to the pipe, close stdout and
    stderr (``denpex scan | jq`` sees EOF even if a thread stays stuck) and exit."""
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


def _wait_child(pid: int, r: int, w: int) -> int:
    """In the parent: the child's exit code from the pipe as soon as it has one (reaped when it
    exits promptly), else from its exit status."""
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
        _reap_soon(pid, 1.0)  # it exits promptly (the usual case): reaped, not left to init
        return got[0]
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == -signal.SIGPIPE:  # `denpex scan ... | head` closed the pipe: a quiet end
        return EXIT_OK
    return code if code >= 0 else EXIT_ERROR


def _reap_soon(pid: int, within: float) -> None:
    """Reap the child if it exits within ``within`` seconds: woken by its exit (a pidfd), not
    by polling, which cost up to 25 ms of every command's wall time."""
    import select
    import time

    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel: poll, briefly
        end = time.monotonic() + within
        while not os.waitpid(pid, os.WNOHANG)[0] and time.monotonic() < end:
            time.sleep(0.002)
        return
    try:
        if select.select([fd], [], [], within)[0]:
            os.waitpid(pid, 0)
    except (OSError, InterruptedError):
        pass
    finally:
        os.close(fd)


def guarded(fn) -> int:
    """The command's own error handling, for work done in the detached child."""
    try:
        return fn()
    except UsageError as exc:
        error(str(exc))
        return EXIT_ERROR
    except (KeyboardInterrupt, BrokenPipeError):
        return EXIT_OK
    except Exception as exc:  # never a traceback on screen
        log.exception("unexpected error")
        error(f"internal error: {type(exc).__name__}: {exc} (run with --debug for details)")
        return EXIT_ERROR


def tolerant_streams() -> None:
    """Text is escaped before it is written; an encoding that still cannot hold a character
    (an ASCII locale) writes it as ``\\u2026`` instead of failing the command."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass
