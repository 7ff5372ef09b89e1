"""Reading the stacks of a job's processes, on demand (``denpex probe --stacks``, ``s`` in watch).

py-spy, where installed (``pip install 'denpex[stacks]'``, or on ``PATH``), gives each process's
Python stack (``py-spy dump --pid P --json``): it stops the process for the few milliseconds it
reads, and needs ptrace rights over it (the same user with ``kernel.yama.ptrace_scope`` 0, or
root). Without it, or where it is refused, /proc gives what the kernel knows: the scheduler state,
the wait channel (``wchan``), and the kernel stack (``/proc/PID/stack``, root only). Denpex runs
only py-spy, read-only, with a timeout per process; grouping is :mod:`denpex_tui.core.stacks`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from denpex_tui.core.stacks import ProcStack, parse_pyspy_json
from denpex_tui.core.text import safe_str

from .processes import PROC

__all__ = ["pyspy_path", "read_stack", "read_stacks", "job_processes", "collective_places"]

PYSPY_TIMEOUT_S = 10.0
MAX_PARALLEL = 4


def pyspy_path() -> str | None:
    """py-spy beside this interpreter (the optional dependency), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("py-spy")


def _read(path: str, limit: int = 65536) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _proc(pid: int, st: ProcStack, proc: str) -> None:
    stat = _read(f"{proc}/{pid}/stat", 4096)
    if stat and ")" in stat:
        rest = stat.rsplit(")", 1)[1].split()
        st.state = rest[0] if rest else ""
    st.wchan = safe_str((_read(f"{proc}/{pid}/wchan", 256) or "").strip("\0\n "))
    if st.wchan == "0":
        st.wchan = ""
    kern = _read(f"{proc}/{pid}/stack", 16384)
    if kern:
        frames = []
        for line in kern.splitlines()[:32]:
            w = line.split("] ", 1)[-1].strip()
            frames.append(safe_str(w.split("+", 1)[0][:120]))
        st.kernel = tuple(f for f in frames if f)
    try:
        st.threads = len(os.listdir(f"{proc}/{pid}/task"))
    except OSError:
        pass


def read_stack(pid: int, rank: int | None, *, pyspy: str | None = None, proc: str = PROC,
               timeout: float = PYSPY_TIMEOUT_S) -> ProcStack:
    """One process's stack: py-spy's Python frames when it can, /proc's facts always."""
    st = ProcStack(pid, rank, "proc")
    _proc(pid, st, proc)
    if pyspy:
        try:
            r = subprocess.run([pyspy, "dump", "--pid", str(pid), "--json"], capture_output=True, timeout=timeout,
                               stdin=subprocess.DEVNULL, check=False)
            if r.returncode == 0:
                frames, threads = parse_pyspy_json(r.stdout.decode("utf-8", "replace"), pid)
                st.frames, st.how = frames, "py-spy"
                st.threads = threads or st.threads
            else:
                msg = r.stderr.decode("utf-8", "replace").strip().splitlines()
                st.error = "py-spy: " + safe_str((msg[-1] if msg else f"exit {r.returncode}")[:200])
        except subprocess.TimeoutExpired:
            st.error = f"py-spy: no answer in {timeout:.0f} s"
        except (OSError, ValueError) as exc:
            st.error = "py-spy: " + safe_str(str(exc)[:200])
    else:
        st.error = "py-spy is not installed (pip install 'denpex[stacks]'): kernel wait channel only"
    if not st.frames and not (st.state or st.wchan):
        st.how = "none"
    return st


def read_stacks(procs: list[tuple[int, int | None]], *, proc: str = PROC,
                timeout: float = PYSPY_TIMEOUT_S) -> list[ProcStack]:
    """Stacks of ``(pid, rank)`` pairs, a few at a time (py-spy stops each process briefly)."""
    pyspy = pyspy_path()
    if not procs:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(procs)), thread_name_prefix="denpex-stacks") as ex:
        return list(ex.map(lambda pr: read_stack(pr[0], pr[1], pyspy=pyspy, proc=proc, timeout=timeout), procs))


def job_processes(logs: list[str], *, all_users: bool = False) -> tuple[list[tuple[int, int | None]], str]:
    """(pid, rank) of the job's training workers here, and how they were chosen."""
    from denpex_tui.probes.jobtie import tie_to_job
    from denpex_tui.probes.processes import find_training_processes

    procs = [p for p in find_training_processes() if p.role == "worker"]
    if logs:
        ours, others = tie_to_job(procs, logs, all_users=all_users)
        why = f"{len(ours)} processes tied to the job" + (f" ({len(others)} other training processes here)"
                                                          if others else "")
        return [(t.process.pid, t.process.rank) for t in ours], why
    mine = [p for p in procs if all_users or _uid(p.pid) == os.getuid()]
    return [(p.pid, p.rank) for p in mine], (f"{len(mine)} training processes of yours here (no --logs: not tied "
                                             "to one job)")


def _uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def collective_places(logs: list[str]) -> dict[int, str]:
    """rank -> "seq N (op)" from the job's Flight Recorder dumps, when it has any."""
    if not logs:
        return {}
    from denpex_tui.core.scan import scan_paths

    try:
        fr = scan_paths(logs, include_user=False, io_timeout=30).job.flight_recorder()
    except (OSError, ValueError):
        return {}
    if fr is None:
        return {}
    return {r: f"seq {g.last_seq} ({g.op})" for g in fr.groups if g.last_seq is not None for r in g.ranks}
