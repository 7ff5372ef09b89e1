"""find_training_processes() against real processes: env ranks, argv local ranks, a launcher and
its children, DataLoader-like forked helpers, and a process that is not training."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from helpers import psutil_create_time

from denpex_tui.probes.processes import (
    find_training_processes,
    is_launcher,
    local_rank_from_argv,
    read_cmdline,
)

SLEEP = "import time; time.sleep(60)"


@pytest.fixture
def spawn():
    procs: list[subprocess.Popen] = []

    def make(args, env=None, **kw):
        e = {k: v for k, v in os.environ.items()
             if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
        e.update(env or {})
        p = subprocess.Popen(args, env=e, stdin=subprocess.DEVNULL, **kw)
        procs.append(p)
        return p

    yield make
    for p in procs:
        try:
            os.killpg(p.pid, 9) if p.pid == os.getpgid(p.pid) else p.kill()
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=10)
        except Exception:
            pass


def _wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _by_pid(pid, **kw):
    for p in find_training_processes(**kw):
        if p.pid == pid:
            return p
    return None


def test_worker_found_from_environment(spawn):
    psutil = pytest.importorskip("psutil")
    p = spawn([sys.executable, "-c", SLEEP], env={"RANK": "7", "LOCAL_RANK": "3",
                                                   "WORLD_SIZE": "16"})
    tp = _wait_for(lambda: _by_pid(p.pid))
    assert (tp.rank, tp.local_rank, tp.world_size) == (7, 3, 16)
    assert tp.role == "worker" and tp.env_readable
    assert tp.ppid == os.getpid()
    assert tp.cmdline[:2] == [sys.executable, "-c"]
    assert tp.create_time == pytest.approx(psutil_create_time(p.pid), abs=1e-6)


def test_local_rank_from_argv_when_env_says_nothing(spawn):
    p = spawn([sys.executable, "-c", SLEEP, "--local_rank=2"])
    tp = _wait_for(lambda: _by_pid(p.pid))
    assert tp.rank is None and tp.local_rank == 2 and tp.role == "worker"


def test_plain_python_is_not_training(spawn):
    p = spawn([sys.executable, "-c", SLEEP])
    _wait_for(lambda: read_cmdline(p.pid))
    assert _by_pid(p.pid) is None
    assert _by_pid(p.pid, include_helpers=True) is None


def test_launcher_and_its_children(spawn, tmp_path):
    # a script named torchrun (python /path/torchrun ...) starting two workers without RANK
    script = tmp_path / "torchrun"
    script.write_text(
        "import subprocess, sys, time\n"
        "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])"
        " for _ in range(2)]\n"
        "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
        "time.sleep(60)\n"
    )
    p = spawn([sys.executable, str(script), "--nproc-per-node=2", "train.py"],
              stdout=subprocess.PIPE, text=True, start_new_session=True)
    kids = [int(x) for x in p.stdout.readline().split()]
    found = _wait_for(lambda: (lambda r: r if {p.pid, *kids} <= {t.pid for t in r} else None)(
        find_training_processes()))
    by = {t.pid: t for t in found}
    assert by[p.pid].role == "launcher"
    for k in kids:
        assert by[k].role == "worker" and by[k].launcher_pid == p.pid and by[k].ppid == p.pid
    # launchers sort first
    assert [t.role for t in found].index("launcher") < [t.role for t in found].index("worker")


def test_forked_helpers_left_out_by_default(spawn):
    code = ("import os, sys, time\n"
            "pid = os.fork()\n"
            "if pid == 0:\n    time.sleep(60); os._exit(0)\n"
            "print(pid, flush=True)\n"
            "time.sleep(60)\n")
    p = spawn([sys.executable, "-c", code], env={"RANK": "1", "LOCAL_RANK": "1"},
              stdout=subprocess.PIPE, text=True, start_new_session=True)
    helper = int(p.stdout.readline())
    _wait_for(lambda: _by_pid(p.pid))
    assert _by_pid(helper) is None
    h = _by_pid(helper, include_helpers=True)
    assert h is not None and h.role == "helper" and h.rank == 1 and h.ppid == p.pid


def test_vanished_and_garbled_proc_entries_are_skipped(tmp_path):
    # a /proc-like tree: a training pid whose stat vanished, one with garbage, one complete
    root = tmp_path / "proc"
    for pid, files in {
        "100": {"cmdline": b"python\0train.py\0", "environ": b"RANK=0\0"},  # no stat: exited
        "101": {"cmdline": b"python\0train.py\0", "environ": b"RANK=1\0", "stat": b"garbage"},
        "102": {"cmdline": b"python\0train.py\0", "environ": b"RANK=2\0LOCAL_RANK=0\0",
                "stat": b"102 (python) S 1 102 102 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 "
                        b"12345 1000 100 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"},
        "103": {"cmdline": b""},  # kernel thread
    }.items():
        d = root / pid
        d.mkdir(parents=True)
        for name, data in files.items():
            (d / name).write_bytes(data)
    (root / "self").mkdir()
    found = find_training_processes(proc=str(root), exclude_self=False)
    assert [(t.pid, t.rank, t.local_rank) for t in found] == [(102, 2, 0)]


def test_classifiers():
    assert is_launcher(["/usr/bin/python3", "-m", "torch.distributed.run", "--nproc-per-node=4"])
    assert is_launcher(["python", "-u", "-m", "torch.distributed.launch", "x.py"])
    assert is_launcher(["/opt/venvs/torch/bin/python", "/opt/venvs/torch/bin/torchrun", "a.py"])
    assert is_launcher(["torchrun", "--standalone", "train.py"])
    assert is_launcher(["python", "-m", "deepspeed.launcher.launch", "--world_info=abc"])
    assert is_launcher(["/usr/bin/python", "/usr/local/bin/deepspeed", "train.py"])
    assert is_launcher(["accelerate", "launch", "train.py"])
    assert not is_launcher(["python", "train.py"])
    assert not is_launcher(["python", "-c", "import torchrun"])
    assert not is_launcher(["bash", "-c", "torchrun x"])
    # real DeepSpeed launcher child command (failure-messages.md B12)
    assert local_rank_from_argv(["/home/.python_libs/conda_env/deepseek/bin/python", "-u",
                                 "finetune_deepseekcoder.py", "--local_rank=0"]) == 0
    assert local_rank_from_argv(["python", "x.py", "--local-rank", "3"]) == 3
    assert local_rank_from_argv(["python", "x.py", "--local_rankx=3"]) is None


def test_only_processes_tied_to_the_job_are_its_own_and_each_says_how(tmp_path):
    """Three real worker processes (RANK in their environment) on this machine: one runs in the
    job's folder, one holds a job log open from elsewhere, one is another job's."""
    import subprocess
    import sys as _sys

    from denpex_tui.probes.jobtie import tie_to_job
    from denpex_tui.probes.processes import find_training_processes

    job = tmp_path / "job"
    (job / "logs").mkdir(parents=True)
    log = job / "logs" / "rank1.log"
    log.write_text("2026-11-29 17:40:10,913 INFO [rank1/2] train: step 1\n")
    other = tmp_path / "other-job"
    other.mkdir()
    code = "import sys, time; f = open(sys.argv[1]) if len(sys.argv) > 1 else None; print('up', flush=True); time.sleep(60)"
    env = {**os.environ, "WORLD_SIZE": "2"}
    procs = [
        subprocess.Popen([_sys.executable, "-c", code], cwd=job, env={**env, "RANK": "0", "LOCAL_RANK": "0"},
                         stdout=subprocess.PIPE, text=True),
        subprocess.Popen([_sys.executable, "-c", code, str(log)], cwd=other, env={**env, "RANK": "1", "LOCAL_RANK": "1"},
                         stdout=subprocess.PIPE, text=True),
        subprocess.Popen([_sys.executable, "-c", code], cwd=other, env={**env, "RANK": "0", "LOCAL_RANK": "0"},
                         stdout=subprocess.PIPE, text=True),
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "up"
        mine = {p.pid for p in procs}
        found = [t for t in find_training_processes() if t.pid in mine]
        assert len(found) == 3
        ours, others = tie_to_job(found, [str(job)])
        how = {t.process.pid: t.how for t in ours}
        assert how == {procs[0].pid: f"runs in {os.path.realpath(job)}",
                       procs[1].pid: f"has {os.path.realpath(log)} open"}
        assert [t.process.pid for t in others] == [procs[2].pid]
        # another user's processes are not followed unless asked
        ours_u, _ = tie_to_job(found, [str(job)], uid=os.getuid() + 12345)
        assert ours_u == []
        assert len(tie_to_job(found, [str(job)], uid=os.getuid() + 12345, all_users=True)[0]) == 2
    finally:
        for p in procs:
            p.kill()
            p.wait()
