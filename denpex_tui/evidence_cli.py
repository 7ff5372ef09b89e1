"""``denpex evidence PATH... -o OUT``: scan the logs, take the probe snapshot now, write the bundle
(core/evidence.py). ``make_bundle`` is shared with ``E`` in watch (app/evidence_key.py)."""

from __future__ import annotations

from denpex_tui.checklist_cli import EXIT_OK, InputError, _warn, console, scan_logs

__all__ = ["make_bundle", "cmd_evidence"]


# What of the environment a colleague needs to judge a failure: versions, and the NCCL / CUDA /
# torch / launcher variables. Deny by default: nothing else is copied, and no variable whose
# name says it holds a credential, whatever its prefix.
_ENV_ALLOW_PREFIX = ("NCCL_", "CUDA_", "CUDNN_", "NVIDIA_", "TORCH_", "TORCHELASTIC_", "PYTORCH_", "DS_",
                     "DEEPSPEED_", "MEGATRON_", "ACCELERATE_", "OMPI_", "PMIX_", "UCX_", "FI_", "GLOO_",
                     "SLURM_", "LOCAL_", "GROUP_", "ROLE_", "OMP_", "MKL_", "KMP_", "XLA_")
_ENV_ALLOW = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LD_LIBRARY_PATH", "PATH",
              "VIRTUAL_ENV", "CONDA_DEFAULT_ENV", "CONDA_PREFIX", "PYTHONUNBUFFERED", "HOSTNAME", "LANG",
              "TRANSFORMERS_VERSION", "HF_HOME", "HF_DATASETS_CACHE", "TRITON_CACHE_DIR"}
_ENV_DENY_WORDS = ("TOKEN", "SECRET", "PASS", "KEY", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "PRIVATE",
                   "CERT", "SIGNATURE", "API")


def env_allowed(name: str) -> bool:
    up = name.upper()
    if any(w in up for w in _ENV_DENY_WORDS):
        return False
    return up in _ENV_ALLOW or up.startswith(_ENV_ALLOW_PREFIX)


def allowed_env(environ=None) -> tuple[dict[str, str], int]:
    """(the allowed variables of ``environ``, how many others were withheld)."""
    import os

    environ = os.environ if environ is None else environ
    keep = {k: v for k, v in environ.items() if env_allowed(k)}
    return keep, len(environ) - len(keep)


def _helper_env() -> dict[str, str]:
    """The environment the helpers run with: the allowed variables, a PATH of absolute entries
    only (an empty or relative entry is the current directory: a planted ``nvidia-smi``)."""
    import os

    env, _ = allowed_env()
    env["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", os.defpath).split(os.pathsep)
                                  if os.path.isabs(p)) or os.defpath
    for k in ("HOME", "LANG", "LC_ALL"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def _run_env(cmd: list[str]):
    """Run a helper isolated: an absolute program (never looked up in the job's folder), no
    shell, stdin closed, the allowed environment, and a fresh empty working directory (a
    ``torch/`` planted in the folder where you run ``denpex evidence`` is never imported;
    Python helpers also get ``-I``)."""
    def run() -> str:
        import shutil
        import subprocess
        import tempfile

        env = _helper_env()
        prog = cmd[0] if cmd[0].startswith("/") else shutil.which(cmd[0], path=env["PATH"])
        if prog is None:
            return f"{cmd[0]}: not found on this node\n"
        with tempfile.TemporaryDirectory(prefix="denpex-env-") as cwd:
            try:
                p = subprocess.run([prog, *cmd[1:]], capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
                                   cwd=cwd, env=env)
            except FileNotFoundError:
                return f"{cmd[0]}: not found on this node\n"
            except subprocess.TimeoutExpired:
                return "gave no answer within 120 s\n"
        from denpex_tui.core.text import safe_str

        out = (p.stdout + p.stderr)[: 1 << 20].decode("utf-8", "replace")
        return "\n".join(safe_str(x) for x in out.splitlines()) + f"\n(exit code {p.returncode})\n"

    return run


def _environment_text() -> str:
    from denpex_tui.core.text import safe_str

    keep, withheld = allowed_env()
    lines = [f"{k}={safe_str(v)}" for k, v in sorted(keep.items())]
    return ("# the environment of `denpex evidence` on this node, deny by default: only NCCL/CUDA/torch/"
            "launcher variables and versions, never a name that says credential\n"
            + "\n".join(lines) + f"\n# {withheld} other variables withheld\n")


def _probe_now(result, paths):
    """The probe snapshot now for the paths the diagnosis names, and the differential of the
    initiating finding when it has one. Only the job's own processes (tied to its folders as
    everywhere: probes/jobtie.py) are measured: another user's or job's argv never enters."""
    from denpex_tui.core.fixes import incident_values
    from denpex_tui.probes.differential import differential, differential_kind
    from denpex_tui.probes.jobtie import tie_to_job
    from denpex_tui.probes.processes import find_training_processes
    from denpex_tui.probes.sampler import Prober

    ini = next((i.initiating for i in result.incidents if i.initiating), None)
    values = incident_values(ini, result.job) if ini else {}
    watch = [values[k] for k in ("dir", "ckpt_dir", "nvme_path") if values.get(k)]
    try:
        ours, _ = tie_to_job(find_training_processes(), list(paths),
                             log_files=[s.path for s in result.job.sources()])
    except Exception:  # noqa: BLE001 - a probe must never break the bundle
        ours = []
    snap = Prober(paths=list(dict.fromkeys(watch)), pids=[t.process.pid for t in ours], discover=False).snapshot()
    diff = None
    if ini is not None and differential_kind(ini.signature):
        sig = result.catalog.get(ini.signature)
        items = [{"text": c.text, "condition": c.condition} for c in sig.checklist] if sig else []
        try:
            diff = differential(ini.signature, values.get("path") or values.get("dir"), snap, checklist=items)
        except ValueError:
            diff = None
    return snap, diff


def make_bundle(paths: list[str], out: str, *, with_env: bool = False, sig_dirs=None, python: str | None = None):
    """Scan ``paths`` and write their evidence bundle to ``out``; returns (Bundle, ScanResult)."""
    import io
    import os

    from denpex_tui.core.evidence import _findings_to_excerpt, job_roots, outside, write_bundle
    from denpex_tui.core.scan import read_tail
    from denpex_tui.core.firstwarn import first_warning as _first_warning
    from denpex_tui.core.verify import VerifyError, baseline_from_scan
    from denpex_tui.render.report import make_console, print_scan

    roots = job_roots(paths)

    def confine(p: str) -> str | None:
        real = outside(p, roots)
        return f"{p}: leads outside the job's tree (to {real}): not read for the bundle" if real else None

    result = scan_logs(paths, sig_dirs, confine=confine)
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
    snap, diff = _probe_now(result, paths)
    env = None
    if with_env:
        import sys as _sys

        py = [os.path.abspath(python) if python else _sys.executable, "-I", "-m", "torch.utils.collect_env"]
        env = {"nvidia-smi.txt": (["nvidia-smi"], _run_env(["nvidia-smi"])),
               "collect_env.txt": (py, _run_env(py)),
               "environment.txt": (["env", "(allowed variables only)"], _environment_text)}
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError(f"{out}: exists and is not a folder (evidence never overwrites)")
    try:
        b = write_bundle(result, out, argv=["denpex", "evidence", *paths, "-o", out]
                         + (["--with-env"] if with_env else []), diagnosis_text=buf.getvalue(),
                         snapshot=snap, differential=diff, baseline=baseline, first_warnings=firsts, env=env,
                         roots=roots)
    except FileExistsError as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"{out}: {exc.strerror or exc}") from None
    return b, result


def cmd_evidence(args, cfg) -> int:
    from rich.text import Text

    from denpex_tui.core.units import human_bytes

    sig_dirs = list(cfg.get("scan", {}).get("signatures", [])) + list(args.signatures or [])
    b, result = make_bundle(list(args.paths), args.output, with_env=args.with_env, sig_dirs=sig_dirs,
                            python=getattr(args, "python", None))
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
