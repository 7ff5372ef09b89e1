"""The evidence bundle of a job: scan its logs, take the probe snapshot now, write the bundle
(:mod:`denpex_tui.core.evidence`). The one maker for ``denpex evidence`` and ``E`` in watch.

Helpers (``nvidia-smi``, torch's ``collect_env``) run isolated: an absolute program, ``python -I``,
an empty working directory, only the allowed environment (deny by default).
"""

from __future__ import annotations

from denpex_tui.core.scan import scan_paths

__all__ = ["BundleError", "make_bundle", "env_allowed", "allowed_env"]


class BundleError(Exception):
    """The bundle could not be made; the message is one line for the user."""


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

    try:
        result = scan_paths(list(paths), signature_dirs=sig_dirs, confine=confine)
    except ValueError as exc:
        raise BundleError(str(exc)) from None
    if result.readable_sources == 0:
        raise BundleError(result.nothing_read(list(paths)))
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
        raise BundleError(f"{out}: exists and is not a folder (evidence never overwrites)")
    try:
        b = write_bundle(result, out, argv=["denpex", "evidence", *paths, "-o", out]
                         + (["--with-env"] if with_env else []), diagnosis_text=buf.getvalue(),
                         snapshot=snap, differential=diff, baseline=baseline, first_warnings=firsts, env=env,
                         roots=roots)
    except FileExistsError as exc:
        raise BundleError(str(exc)) from None
    except OSError as exc:
        raise BundleError(f"{out}: {exc.strerror or exc}") from None
    return b, result
