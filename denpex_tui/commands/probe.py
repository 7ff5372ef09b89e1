"""``denpex probe``: measure the training processes on this node and the paths they write to.

    denpex probe [--pid PID...] [--path DIR...] [--logs PATH...] [--json]
                 [--stream --interval S]
    denpex probe --stacks [--logs PATH...] [--pid PID...] [--json]
    denpex probe --hosts A,B | --slurm-job J | --pods P,Q [--probe-cmd TEMPLATE] [--json]

One snapshot (readable view, or ``--json``: one schema-1 object), or with ``--stream`` JSON Lines
snapshots every ``--interval`` seconds until SIGINT/SIGTERM (exit 0). ``--logs`` reads logs for
paths to watch (checkpoint dirs, nvme_path, elastic log dir), for ENOSPC/EMFILE errors to explain
(the differential), and, while streaming, for checkpoint-save lines (fd growth per save).

Exit codes: 0 ok, 2 usage or input error (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
import time

from denpex_tui.core.text import safe_json, safe_str

PROG = "denpex probe"
MAX_DIFFERENTIALS = 4


class _InputError(Exception):
    pass


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "probe",
        help="measure fds, deleted-open files, disk space and inodes of the training processes",
        description=(
            "Measure the local training processes (fds vs RLIMIT_NOFILE, deleted-but-open files, "
            "rss) and the paths they use (bytes, inodes, reserved blocks, mount and filesystem "
            "type), to tell apart the causes of ENOSPC and EMFILE. Read-only."
        ),
    )
    p.add_argument("--pid", nargs="+", action="extend", default=[], metavar="PID",
                   help="measure these processes instead of discovering training processes")
    p.add_argument("--path", nargs="+", action="extend", default=[], metavar="DIR",
                   help="directories to watch (checkpoint dir, nvme_path, log dir)")
    p.add_argument("--logs", nargs="+", action="extend", default=[], metavar="PATH",
                   help="log files or directories: find the paths to watch and the errors in them")
    p.add_argument("--json", action="store_true", help="print one JSON snapshot (schema 1)")
    p.add_argument("--stacks", action="store_true",
                   help="the Python stacks of the job's processes (py-spy, else /proc's wait channel), "
                        "grouped by identical stack; with --logs, the job's processes and collectives")
    p.add_argument("--stream", action="store_true",
                   help="print a JSON snapshot per line every --interval seconds until stopped")
    p.add_argument("--interval", default="2", metavar="S",
                   help="seconds between streamed snapshots (default 2)")
    p.add_argument("--timeout", default="2", metavar="S", help=argparse.SUPPRESS)
    p.add_argument("--count", default=None, help=argparse.SUPPRESS)  # stop after N snapshots
    from denpex_tui.commands.remote import add_arguments

    add_arguments(p)
    p.set_defaults(func=run)
    return p


def _err(msg: str) -> int:
    sys.stderr.write(f"{PROG}: {safe_str(msg)}\n")
    sys.stderr.flush()
    return 2


def _positive_float(name: str, v: str, lo: float, hi: float) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise _InputError(f"{name}: expected a number of seconds, got {str(v)[:40]!r}")
    if not math.isfinite(f) or f < lo or f > hi:
        raise _InputError(f"{name}: must be between {lo:g} and {hi:g} seconds, got {v}")
    return f


def _pids(values: list[str]) -> list[int]:
    out = []
    for v in values:
        for part in str(v).split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isdigit() or int(part) <= 0:
                raise _InputError(f"--pid: {part[:40]!r} is not a process id")
            pid = int(part)
            if not os.path.exists(f"/proc/{pid}") and os.path.isdir("/proc"):
                raise _InputError(f"--pid {pid}: no such process")
            out.append(pid)
    return out


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except _InputError as e:
        return _err(str(e))
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        return 0


def _quiet_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _run(args: argparse.Namespace) -> int:
    from denpex_tui.commands import remote as remote_cli

    if remote_cli.wanted(args):
        for opt in ("pid", "path", "logs", "stream"):
            if getattr(args, opt, None):
                raise _InputError(f"--{opt} is for this node's probe; for the others put it in "
                                  "--probe-cmd (it runs their denpex probe)")
        return remote_cli.run(args, _err)
    if getattr(args, "probe_cmd", None):
        raise _InputError("--probe-cmd needs --hosts, --slurm-job or --pods")
    from denpex_tui.probes.logpaths import LogFollower, scan_logs
    from denpex_tui.probes.sampler import Prober
    from denpex_tui.probes.trends import TrendTracker

    interval = _positive_float("--interval", getattr(args, "interval", "2"), 0.05, 3600)
    timeout = _positive_float("--timeout", getattr(args, "timeout", "2"), 0.05, 600)
    count = None
    if getattr(args, "count", None) is not None:
        try:
            count = int(args.count)
        except ValueError:
            raise _InputError(f"--count: not an integer: {args.count!r}")
    pids = _pids(getattr(args, "pid", []) or [])
    if getattr(args, "stacks", False):
        if getattr(args, "stream", False):
            raise _InputError("--stacks takes one reading; it cannot --stream")
        for lg in getattr(args, "logs", []) or []:
            if not os.path.exists(lg):
                raise _InputError(f"--logs {lg}: no such file or directory")
        from denpex_tui.commands.stacks import run_stacks

        return run_stacks(args, pids, _err)
    paths = list(getattr(args, "path", []) or [])
    for p in paths:
        if "\0" in p:
            raise _InputError("--path: contains a NUL byte")
    logs = list(getattr(args, "logs", []) or [])
    for lg in logs:
        if not os.path.exists(lg):
            raise _InputError(f"--logs {lg}: no such file or directory")
        if not os.access(lg, os.R_OK):
            raise _InputError(f"--logs {lg}: permission denied")

    prober = Prober(pids=pids or None, paths=paths, timeout=timeout)
    scan = None
    if logs:
        scan = scan_logs(logs)
        for w in scan.watch:
            prober.add_path(w.path, "log: " + w.why, w.source_line)
    trends = TrendTracker()

    if not getattr(args, "stream", False):
        return _once(args, prober, trends, scan)
    return _stream(prober, trends, logs, interval, count, LogFollower)


def _once(args, prober, trends, scan) -> int:
    """One reading: the snapshot, and a differential for each kind of error the logs name."""
    snap = prober.snapshot()
    trends.ingest(snap)
    diffs = _differentials(scan, prober, snap, trends) if scan is not None else []
    if getattr(args, "json", False):
        out = snap.to_json()
        if scan is not None:
            out["logs"] = {
                "files_read": scan.files_read,
                "files_skipped": [{"file": f, "reason": r} for f, r in scan.files_skipped],
                "watch": [{"path": w.path, "why": w.why, "exists": w.exists,
                           "named": w.wanted, "log": w.log, "line": w.line_no}
                          for w in scan.watch],
            }
            out["differentials"] = [
                dict(d.to_json(), log=e.log, line=e.line_no, line_text=e.source_line)
                for e, d in diffs
            ]
        sys.stdout.write(json.dumps(safe_json(out), ensure_ascii=False) + "\n")
        sys.stdout.flush()
    else:
        from denpex_tui.render.probe_view import render

        render(snap, trends=None, differentials=[d for _e, d in diffs])
    return 0


def _differentials(scan, prober, snap, trends) -> list:
    """(error line, differential) pairs, at most MAX_DIFFERENTIALS: EMFILE is about the process,
    one per signature; ENOSPC is about the filesystem, one per signature and filesystem."""
    from denpex_tui.probes.differential import differential

    diffs = []
    seen = set()
    for e in scan.errors:
        if e.signature_id in ("os.emfile", "os.enfile"):
            key = (e.signature_id, None)
        elif e.path and not e.path.startswith("<"):
            m = prober.mounts.find(os.path.abspath(e.path))
            key = (e.signature_id, m.mount_point if m else e.path)
        else:
            key = (e.signature_id, "shm" if e.path else None)
        if key in seen:
            continue
        seen.add(key)
        try:
            diffs.append((e, differential(e.signature_id, e.path, snap, trends)))
        except ValueError:
            continue
        if len(diffs) >= MAX_DIFFERENTIALS:
            break
    return diffs


def _stream(prober, trends, logs, interval: float, count: int | None, follower_cls) -> int:
    stop = threading.Event()
    old = {}

    def _handler(signum, frame):  # noqa: ARG001
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            old[sig] = signal.signal(sig, _handler)
        except (ValueError, OSError):  # not the main thread
            pass
    follower = follower_cls(logs) if logs else None
    n = 0
    t_next = time.monotonic()
    try:
        while not stop.is_set():
            if follower is not None:
                now = time.time()
                new = follower.poll_all()
                for ev in new.saves:
                    trends.note_checkpoint_save(ev.rank, now, local_rank=ev.local_rank)
                for w in new.watch:  # a new checkpoint dir, nvme_path, error path
                    prober.add_path(w.path, "log: " + w.why, w.source_line)
            snap = prober.snapshot()
            trends.ingest(snap)
            out = snap.to_json()
            out["trends"] = trends.to_json()
            sys.stdout.write(json.dumps(safe_json(out), ensure_ascii=False) + "\n")
            sys.stdout.flush()
            n += 1
            if count is not None and n >= count:
                break
            t_next += interval
            delay = t_next - time.monotonic()
            if delay < 0:  # fell behind: skip the missed ticks, keep the cadence
                t_next = time.monotonic()
                delay = 0
            stop.wait(delay)
    except BrokenPipeError:
        _quiet_stdout()
    finally:
        for sig, h in old.items():
            try:
                signal.signal(sig, h)
            except (ValueError, OSError, TypeError):
                pass
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (python -m denpex_tui.commands.probe) until the lead wires it into denpex."""
    parser = argparse.ArgumentParser(prog="denpex")
    sub = parser.add_subparsers(dest="cmd")
    add_parser(sub)
    args = parser.parse_args(["probe", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
