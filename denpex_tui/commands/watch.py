"""``denpex watch [PATH...] [--pid PID...] [--path DIR...] [--exec CMD...] [--signatures DIR]
[--theme NAME] [--demo] [--hosts A,B | --slurm-job J | --pods P,Q] [--probe-cmd T]``: the live
TUI; with the last options the gauges and the rank table show every node's probe."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading

from denpex_tui.core.clock import start_epoch

__all__ = ["add_parser", "run"]


def add_parser(subparsers) -> None:
    w = subparsers.add_parser("watch", help="follow a job's logs live in a terminal UI (Textual)")
    w.add_argument("paths", nargs="*", metavar="PATH",
                   help="log files, directories or globs (one job); none: the logs of the training processes here")
    w.add_argument("--pid", dest="pids", action="append", type=int, default=[], metavar="PID",
                   help="measure exactly this process (fds, limits, deleted-open files); repeatable")
    w.add_argument("--path", dest="probe_paths", action="append", default=[], metavar="DIR",
                   help="directory to watch for free bytes and inodes (checkpoint dir, nvme_path); repeatable")
    w.add_argument("--exec", dest="exec_cmds", action="append", default=[], metavar="[RANK=]CMD",
                   help="read a command's output as a log, e.g. 3='kubectl logs -f pod-3'; repeatable")
    w.add_argument("--exec-view-max", type=int, default=64, metavar="MIB",
                   help="disk the view may use for --exec output (default 64 MiB; past it lines are dropped "
                        "from the view, said in it, still read for findings)")
    w.add_argument("--signatures", action="append", default=[], metavar="DIR", help="extra signature pack (repeatable)")
    w.add_argument("--theme", metavar="NAME", help="denpex-dark (default), denpex-light, denpex-high-contrast")
    w.add_argument("--demo", action="store_true",
                   help="play a realistic 8-rank job (rank 5 fills its disk) into a temporary folder and watch it")
    w.add_argument("--demo-speed", type=float, default=0.5, metavar="X", help=argparse.SUPPRESS)
    w.add_argument("--no-probes", action="store_true", help="do not measure processes and paths")
    w.add_argument("--quiet-after", type=float, default=30.0, help=argparse.SUPPRESS)
    w.add_argument("--notify", action="store_true",
                   help="ring the bell and send a desktop notification (OSC 9) when the diagnosis changes")
    w.add_argument("--wait-for-logs", action="store_true", help="wait for log paths that do not exist yet")
    w.add_argument("--all-users", action="store_true",
                   help="follow other users' training processes too (default: only yours)")
    w.add_argument("--max-stat-rate", type=float, default=500.0, metavar="N",
                   help="cap on stat/open calls per second while polling (protects a Lustre MDS; "
                        "1024 files need ~2000 for ~1 s latency without inotify); default 500")
    w.add_argument("--max-files", type=int, default=10000, metavar="N",
                   help="files followed at most (default 10000); deleted files in their grace period do not count, "
                        "a newer attempt's files replace an older attempt's, the rest are counted and named")
    from denpex_tui.commands.remote import add_arguments

    add_arguments(w)
    w.set_defaults(func=run)


def _bad_start(args, watch_cfg) -> str | None:
    """What makes the start-up input unusable, in one line (None: fine)."""
    import glob

    if not args.wait_for_logs:
        for p in args.paths:
            if any(c in p for c in "*?["):
                if not glob.glob(p, recursive=True):
                    return f"{p}: no file matches (--wait-for-logs waits for it)"
            elif not os.path.exists(p):
                return f"{p}: no such file or directory (--wait-for-logs waits for it)"
    theme = args.theme or watch_cfg.get("theme")
    if theme:
        from textual.theme import BUILTIN_THEMES

        from denpex_tui.app.theming import load_themes

        names = set(BUILTIN_THEMES) | {t.name for t in load_themes()[0]}
        if theme not in names:
            ours = sorted(n for n in names if n.startswith("denpex-"))
            return f"no theme named {theme!r} (denpex's: {', '.join(ours)}; and Textual's own)"
    return None


class _Refused(Exception):
    """A start that cannot work: one line on stderr and exit 2, before the screen opens."""


def run(args, cfg) -> int:
    watch_cfg = cfg.get("watch", {}) if cfg else {}
    stop = threading.Event()
    try:
        if args.max_stat_rate <= 0:
            print("denpex: --max-stat-rate must be a positive number of calls per second", file=sys.stderr)
            return 2
        specs = _probe_specs(args)
        problem = _bad_start(args, watch_cfg)
        if problem:
            raise _Refused(f"denpex watch: {problem}")
        if args.exec_view_max < 1:
            raise _Refused("denpex watch: --exec-view-max: at least 1 (MiB)")
        paths, notice, tmp, writer = _sources(args, specs, stop)
    except _Refused as e:
        print(str(e), file=sys.stderr)
        return 2
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.core.text import safe_str

    from denpex_tui.app import spool
    from denpex_tui.app.factory import make_app

    sig_dirs = list(watch_cfg.get("signatures", [])) + list(args.signatures or [])
    catalog = load_catalog(sig_dirs)
    for p in catalog.problems:
        print(f"denpex: signatures: {safe_str(p)}", file=sys.stderr)
    opts = _options(args, watch_cfg, paths, notice, tmp, specs)
    spool.MAX_BYTES = args.exec_view_max << 20
    app = make_app(opts, catalog)
    if writer is not None:
        writer.start()

    def cleanup() -> None:
        from denpex_tui.app.spool import remove_all

        remove_all()  # --exec spools: also on a signal, whatever the view's worker got to
        stop.set()
        if writer is not None:
            writer.join(timeout=2)
        if tmp is not None:
            tmp.cleanup()

    try:
        code = _run(app, cleanup)
    finally:
        cleanup()
    return code


def _probe_specs(args):
    """The channels to the job's other nodes (``--ssh``, ``--slurm-job``, ``--probe-cmd``...),
    or None: probes of this node only."""
    from denpex_tui.commands import remote as remote_cli
    from denpex_tui.probes.transports import TransportError

    if not (remote_cli.wanted(args) or args.probe_cmd):
        return None
    try:
        specs = remote_cli.channel_specs(args)
    except TransportError as e:
        raise _Refused(f"denpex watch: {e}") from None
    try:
        wait = float(args.wait)
        if not 0.5 <= wait <= 3600:
            raise ValueError
    except ValueError:
        raise _Refused(f"denpex watch: --wait: expected seconds between 0.5 and 3600, got {args.wait!r}") from None
    if args.pids or args.probe_paths:
        raise _Refused("denpex watch: --pid and --path measure this node; for the job's nodes put them "
                       "in --probe-cmd (it runs their denpex probe)")
    return specs


def _sources(args, specs, stop: threading.Event):
    """What to follow: the paths given, the demo job being written, a Slurm job's output files,
    or the logs found on this machine. Returns ``(paths, notice, demo folder, demo writer)``."""
    paths = list(args.paths)
    if args.demo:
        from denpex_tui.core.demo import play_demo_job

        tmp = tempfile.TemporaryDirectory(prefix="denpex-demo-")
        writer = threading.Thread(target=play_demo_job, args=(tmp.name,), daemon=True, name="denpex-demo",
                                  kwargs=dict(realtime=True, speed=max(0.05, args.demo_speed), stop=stop))
        notice = (f"demo: an 8-rank job is being written to {tmp.name} in real time; rank 5 will fill "
                  "the demo's simulated checkpoint disk at step 100")
        return [tmp.name], notice, tmp, writer
    if not paths and not args.exec_cmds and specs and args.slurm_job:
        from denpex_tui.probes.transports import slurm_job_output

        paths = slurm_job_output(args.slurm_job)  # the job's StdOut/StdErr files
        if not paths:
            raise _Refused(f"denpex watch: job {args.slurm_job}'s output files are not readable here; "
                           "give the logs: denpex watch PATH --slurm-job J")
    elif not paths and not args.exec_cmds:
        from denpex_tui.app.discover import discover_logs

        d = discover_logs()
        if not d.paths:
            raise _Refused(f"denpex watch: {d.message()}.\n"
                           "  Give the logs:  denpex watch /path/to/job/logs   (files, directories or globs)\n"
                           "  or a command:   denpex watch --exec '3=kubectl logs -f pod-3'\n"
                           "  or try it:      denpex watch --demo")
        args.pids = args.pids or []
        return d.paths, d.message(), None, None
    return paths, "", None, None


def _options(args, watch_cfg, paths: list[str], notice: str, tmp, specs):
    from denpex_tui.app.factory import WatchOptions
    from denpex_tui.app.feed import common_root

    probe_paths = [os.path.abspath(p) for p in args.probe_paths]
    if not args.demo:
        for p in paths:
            if os.path.isdir(p):
                probe_paths.append(os.path.abspath(p))
    return WatchOptions(
        paths=paths, execs=list(args.exec_cmds), pids=list(args.pids), probe_paths=probe_paths,
        theme=args.theme or watch_cfg.get("theme"), processes=not args.demo, probes=not args.no_probes,
        discover=False if args.demo else None, notice=notice, root=common_root(paths),
        max_stat_rate=args.max_stat_rate, all_users=args.all_users, max_files=max(1, args.max_files),
        demo_root=tmp.name if args.demo else None, quiet_s=args.quiet_after, notify=args.notify,
        probe_specs=specs, probe_wait=float(args.wait) if specs else 20.0, started=start_epoch(),
    )


def _run(app, cleanup) -> int:
    """Run the app; SIGTERM, SIGHUP (the terminal or the ssh session went away) and SIGPIPE
    end it as ``q`` does: the terminal is restored (alternate screen left, mouse tracking
    off), --exec commands are stopped, --demo's folder removed. If the app cannot finish
    (a dead terminal), the process ends anyway after a few seconds, commands killed."""
    import asyncio
    import signal

    from denpex_tui.live.execsource import kill_all

    got: list[int] = []
    timers: list[threading.Timer] = []

    def last_resort(sig: int) -> None:
        kill_all(signal.SIGKILL)
        try:
            cleanup()
        finally:
            os._exit(128 + sig)

    def on_signal(sig: int) -> None:
        if got:
            return
        got.append(sig)
        kill_all()  # first: with the terminal gone, nothing after this is certain
        app.exit(return_code=128 + sig)
        timer = threading.Timer(5.0, last_resort, args=(sig,))
        timer.daemon = True
        timers.append(timer)
        timer.start()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sigs = (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
        for sig in sigs:
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        try:
            await app.run_async()
        finally:  # while the loop's self-pipe is open (see commands/follow.py, _quiet_signals)
            for sig in sigs:
                try:
                    loop.remove_signal_handler(sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass

    asyncio.run(main())
    for t in timers:
        t.cancel()
    kill_all(signal.SIGKILL)  # whatever the engine could not stop in time
    return 128 + got[0] if got else 0
