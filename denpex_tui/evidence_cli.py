"""``denpex evidence PATH... -o OUT``: scan the logs, take the probe snapshot now, write the bundle
(core/evidence.py). ``make_bundle`` is shared with ``E`` in watch (app/evidence_key.py)."""

from __future__ import annotations

from denpex_tui.checklist_cli import EXIT_OK, InputError, console, scan_logs

__all__ = ["make_bundle", "cmd_evidence"]


def _run_env(cmd: list[str]):
    def run() -> str:
        import subprocess

        try:
            p = subprocess.run(cmd, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            return f"{cmd[0]}: not found on this node\n"
        except subprocess.TimeoutExpired:
            return "gave no answer within 120 s\n"
        from denpex_tui.core.text import safe_str

        out = (p.stdout + p.stderr)[: 1 << 20].decode("utf-8", "replace")
        return "\n".join(safe_str(x) for x in out.splitlines()) + f"\n(exit code {p.returncode})\n"

    return run


def _probe_now(result):
    """The probe snapshot now for the paths the diagnosis names, and the differential of the
    initiating finding when it has one."""
    from denpex_tui.core.fixes import incident_values
    from denpex_tui.probes.differential import differential, differential_kind
    from denpex_tui.probes.sampler import Prober

    ini = next((i.initiating for i in result.incidents if i.initiating), None)
    values = incident_values(ini, result.job) if ini else {}
    paths = [values[k] for k in ("dir", "ckpt_dir", "nvme_path") if values.get(k)]
    snap = Prober(paths=list(dict.fromkeys(paths))).snapshot()
    diff = None
    if ini is not None and differential_kind(ini.signature):
        sig = result.catalog.get(ini.signature)
        items = [{"text": c.text, "condition": c.condition} for c in sig.checklist] if sig else []
        try:
            diff = differential(ini.signature, values.get("path") or values.get("dir"), snap, checklist=items)
        except ValueError:
            diff = None
    return snap, diff


def make_bundle(paths: list[str], out: str, *, with_env: bool = False, sig_dirs=None):
    """Scan ``paths`` and write their evidence bundle to ``out``; returns (Bundle, ScanResult)."""
    import io
    import os

    from denpex_tui.core.evidence import _findings_to_excerpt, write_bundle
    from denpex_tui.core.scan import read_tail
    from denpex_tui.core.firstwarn import first_warning as _first_warning
    from denpex_tui.core.verify import VerifyError, baseline_from_scan
    from denpex_tui.render.report import make_console, print_scan

    result = scan_logs(paths, sig_dirs)
    buf = io.StringIO()
    print_scan(result, make_console(buf), measure=False)
    firsts = {}
    for _role, f in _findings_to_excerpt(result):
        w = _first_warning(f, result.job, result.catalog, read_tail)
        if w is not None and f.rank is not None:
            firsts.setdefault(f.rank, w)
    try:
        baseline = baseline_from_scan(result, None, " ".join(paths)) if result.incidents else None
    except VerifyError:
        baseline = None
    snap, diff = _probe_now(result)
    env = None
    if with_env:
        import sys as _sys

        py = [_sys.executable, "-m", "torch.utils.collect_env"]
        env = {"nvidia-smi.txt": (["nvidia-smi"], _run_env(["nvidia-smi"])),
               "collect_env.txt": (py, _run_env(py))}
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError(f"{out}: exists and is not a folder (evidence never overwrites)")
    try:
        b = write_bundle(result, out, argv=["denpex", "evidence", *paths, "-o", out]
                         + (["--with-env"] if with_env else []), diagnosis_text=buf.getvalue(),
                         snapshot=snap, differential=diff, baseline=baseline, first_warnings=firsts, env=env)
    except FileExistsError as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"{out}: {exc.strerror or exc}") from None
    return b, result


def cmd_evidence(args, cfg) -> int:
    from rich.text import Text

    from denpex_tui.core.units import human_bytes

    sig_dirs = list(cfg.get("scan", {}).get("signatures", [])) + list(args.signatures or [])
    b, result = make_bundle(list(args.paths), args.output, with_env=args.with_env, sig_dirs=sig_dirs)
    con = console()
    con.print(Text(f"wrote {b.path}: {len(b.files)} files, {human_bytes(sum(b.files.values()))}", style="bold"))
    for rel, n in sorted(b.files.items()):
        con.print(Text(f"  {rel}  {human_bytes(n)}"))
    for x in b.left_out:
        con.print(Text("  left out: " + x, style="yellow"))
    if not result.incidents:
        con.print(Text("no failure found in these logs: the bundle holds the scan and the probe snapshot only",
                       style="yellow"))
    return EXIT_OK
