"""``denpex evidence PATH... -o OUT``: the job's evidence bundle (made by
:mod:`denpex_tui.render.bundle`, the same maker as ``E`` in watch)."""

from __future__ import annotations

from denpex_tui.commands.common import EXIT_OK, InputError, console
from denpex_tui.commands.common import warn as _warn
from denpex_tui.render.bundle import BundleError, make_bundle

__all__ = ["cmd_evidence"]


def cmd_evidence(args, cfg) -> int:
    from rich.text import Text

    from denpex_tui.core.units import human_bytes

    sig_dirs = list(cfg.get("scan", {}).get("signatures", [])) + list(args.signatures or [])
    try:
        b, result = make_bundle(list(args.paths), args.output, with_env=args.with_env, sig_dirs=sig_dirs,
                                python=getattr(args, "python", None))
    except BundleError as exc:
        raise InputError(str(exc)) from None
    con = console()
    con.print(Text(f"wrote {b.path}: {len(b.files)} files, {human_bytes(sum(b.files.values()))}", style="bold"))
    for rel, n in sorted(b.files.items()):
        con.print(Text(f"  {rel}  {human_bytes(n)}"))
    for x in b.left_out:
        con.print(Text("  left out: " + x, style="yellow"))
    for w in result.warnings:
        if "leads outside the job's tree" in w:
            _warn(w)
    for rel, what in sorted(b.redacted.items()):
        con.print(Text(f"  redacted in {rel}: {what}", style="yellow"))
    if not result.incidents:
        con.print(Text("no failure found in these logs: the bundle holds the scan and the probe snapshot only",
                       style="yellow"))
    return EXIT_OK
