"""``denpex scan``: triage the logs of a job (``--follow`` hands over to commands/follow.py; an
evidence bundle shows its stored diagnosis, commands/checklist.py)."""

from __future__ import annotations

import os
import tempfile

from denpex_tui.commands.common import EXIT_ERROR, EXIT_FOUND, EXIT_OK, UsageError, error, json_out

__all__ = ["cmd_scan"]

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


def cmd_scan(args, cfg) -> int:
    from denpex_tui.core.scan import scan_paths

    sig_dirs = list(cfg.get("scan", {}).get("signatures", [])) + list(args.signatures or [])
    if args.follow:
        from denpex_tui.commands.follow import run_follow

        return run_follow(args, sig_dirs)
    paths = list(args.paths)
    from denpex_tui.core.heap import reuse_big_buffers

    reuse_big_buffers()  # one read of the history, then the end: a freed chunk's pages are reused
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
        error(f"warning: {exc}: the folder is scanned as logs")
        bundle = False
    if bundle:
        from denpex_tui.commands.checklist import scan_bundle

        return scan_bundle(paths[0], args)
    from denpex_tui.commands.checklist import rhythm_bytes, scan_extras  # --control and the failure's rhythm

    try:
        result = scan_paths(
            paths,
            signature_dirs=sig_dirs,
            jobs=args.jobs,
            rank=args.rank,
            attempt=args.attempt,
            since=args.since,
            io_timeout=args.io_timeout,
            progress_steps_max=rhythm_bytes(args),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if result.readable_sources == 0:  # one line: what stopped it (the warnings say the same)
        error(result.nothing_read(paths))
        return EXIT_ERROR
    for w in result.warnings:
        error("warning: " + w)
    extras = scan_extras(result, args)
    if args.json:
        json_out({**result.to_json(), **extras.json})
    else:
        from denpex_tui.render.report import make_console, print_scan

        con = make_console()
        print_scan(result, con, verbose=args.verbose, measure=not args.no_measure)
        extras.print(con)
    if tmp is not None:
        tmp.cleanup()
    return EXIT_FOUND if result.incidents or result.job.unknown_lines() else EXIT_OK
