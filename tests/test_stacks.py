"""Stacks of stuck ranks: real processes blocked in known places, read with py-spy (or /proc
without it), grouped by identical stack; and a real torchrun gloo hang."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from denpex_tui.core.stacks import Frame, ProcStack, group_stacks, parse_pyspy_json
from denpex_tui.probes.stacks import pyspy_path

ROOT = Path(__file__).resolve().parent.parent
MAKE = ROOT / "tests" / "fixtures" / "runs" / "make"

RANK_SCRIPT = """
import sys, time
def barrier():
    time.sleep(120)
def save_checkpoint():
    with open(sys.argv[2], 'w') as f:
        f.write('x')
        time.sleep(120)
print('ready', flush=True)
(save_checkpoint if sys.argv[1] == 'save' else barrier)()
"""


def _wait(cond, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def job(tmp_path):
    """Four 'ranks' in a job folder: 0, 1, 3 in barrier(), 2 in save_checkpoint()."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    procs = []
    for r in range(4):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="4")
        procs.append(subprocess.Popen([sys.executable, str(script), "save" if r == 2 else "wait",
                                       str(tmp_path / f"ckpt{r}")], cwd=tmp_path, env=env,
                                      stdout=subprocess.PIPE, stdin=subprocess.DEVNULL))
    try:
        for p in procs:
            assert p.stdout.readline().strip() == b"ready"
        yield tmp_path, procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _probe(*args):
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "probe", "--stacks", "--json", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.skipif(pyspy_path() is None, reason="py-spy is not installed (the [stacks] extra)")
def test_probe_stacks_groups_the_job_s_processes(job):
    folder, procs = job
    out = _probe("--logs", str(folder))
    assert out["tool"] == "py-spy" and "4 processes tied to the job" in out["processes"]
    groups = out["groups"]
    assert [g["count"] for g in groups] == [1, 3]  # the odd one first
    odd, many = groups
    assert odd["ranks"] == [2] and odd["what"] == "save_checkpoint" and many["ranks"] == [0, 1, 3]
    assert many["what"] == "barrier" and many["frames"][0]["name"] == "barrier"
    assert "3 ranks 0-1,3 in barrier" in many["headline"]
    # --pid takes exactly these processes
    one = _probe("--pid", str(procs[0].pid))
    assert [g["ranks"] for g in one["groups"]] == [[0]]


def test_without_py_spy_proc_still_groups(job):
    folder, procs = job
    from denpex_tui.probes.stacks import read_stack

    def asleep():  # "ready" is printed just before the sleep: under load a process may still run,
        # or be woken between the reads of its state and of its wait channel (then "0": none)
        ss = [read_stack(p.pid, r, pyspy=None) for r, p in enumerate(procs)]
        return ss if all(s.state == "S" and s.wchan for s in ss) else None

    stacks = _wait(asleep, 30, "the four processes asleep")
    assert all(s.how == "proc" for s in stacks)
    assert all("py-spy is not installed" in s.error for s in stacks)
    groups = group_stacks(stacks)
    assert sum(g.count for g in groups) == 4 and all(g.wchan for g in groups)


def test_hostile_frames_are_made_safe():
    text = json.dumps([{"os_thread_id": 7, "thread_name": "MainThread", "frames": [
        {"name": "f\x1b]52;c;ZWNobw==\x07", "short_filename": "t\u202epy.py", "line": 3}]}])
    frames, n = parse_pyspy_json(text, 7)
    assert n == 1 and "\x1b" not in frames[0].name and "\u202e" not in frames[0].file


def test_groups_carry_the_collective_from_the_dumps():
    a = ProcStack(10, 0, "py-spy", (Frame("all_reduce", "torch/distributed/distributed_c10d.py", 1),
                                      Frame("train", "train.py", 5)))
    b = ProcStack(11, 1, "py-spy", a.frames)
    c = ProcStack(12, 2, "py-spy", (Frame("_save", "torch/serialization.py", 9), Frame("save", "torch/serialization.py", 3),
                                      Frame("train", "train.py", 7)))
    gs = group_stacks([a, b, c], {0: "seq 6 (nccl:all_reduce)", 1: "seq 6 (nccl:all_reduce)", 2: "seq 5 (x)"})
    assert [g.headline() for g in gs] == ["rank 2 in torch.save, seq 5 (x) (from train (train.py:7))",
                                          "2 ranks 0-1 in all_reduce, seq 6 (nccl:all_reduce) (from train (train.py:5))"]


def _has_torch():
    try:
        import torch  # noqa: F401
        import torch.distributed.run  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.skipif(not (_has_torch() and pyspy_path()), reason="needs torch (CPU) and py-spy")
@pytest.mark.timeout(300)
def test_a_live_torchrun_hang_is_shown_grouped(tmp_path):
    """A real torchrun gloo job: rank 2's checkpoint write stalls, ranks 0, 1, 3 wait in the
    barrier after it. The stacks say so while it hangs."""
    (tmp_path / "train.py").write_bytes((MAKE / "train.py").read_bytes())
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    log = open(tmp_path / "console.log", "wb")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4", "--log-dir", "logs",
         "--tee", "3", "train.py", "--steps", "30", "--save-every", "10", "--slow-save-rank", "2",
         "--slow-save-step", "20", "--slow-save-seconds", "200", "--timeout", "200"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait(lambda: b"[rank2/4] train: Saving checkpoint step 20 " in (tmp_path / "console.log").read_bytes(),
              180, "rank 2's slow save")

        def grouped():
            out = _probe("--logs", str(tmp_path))
            gs = {g["what"]: g["ranks"] for g in out["groups"]}
            return gs if gs.get("barrier") == [0, 1, 3] else None

        gs = _wait(grouped, 60, "ranks 0, 1, 3 in the barrier")
        assert gs["torch.save"] == [2]
    finally:
        # torchrun starts each worker in a session of its own: killing the launcher's group
        # left four workers behind (reparented to init, still alive minutes later)
        import psutil

        try:
            workers = psutil.Process(launcher.pid).children(recursive=True)
        except psutil.Error:
            workers = []
        os.killpg(launcher.pid, signal.SIGKILL)
        for w in workers:
            try:
                w.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(workers, timeout=30)
        launcher.wait()
        log.close()
