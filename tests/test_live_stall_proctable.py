"""StallDetector (pure logic, injected times) and ProcessTable (stub finder)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass

from denpex_tui.live.proctable import ProcessEvent, ProcessTable
from denpex_tui.live.stall import StallCleared, StallDetector, StallEvent


def feed(det, ranks, t0, t1, period, skip=None, node="n0"):
    """Every rank logs a burst of 3 lines every ``period`` seconds in [t0, t1)."""
    t = t0
    while t < t1:
        for r in ranks:
            if skip and skip(r, t):
                continue
            for j in range(3):
                det.observe(r, node, t + 0.01 * j + 0.001 * r)
        t += period


def run_checks(det, t0, t1, step=1.0):
    out = []
    t = t0
    while t <= t1:
        out.extend(det.check(t))
        t += step
    return out


def test_rank_silent_while_peers_continue_is_a_stall_then_cleared():
    d = StallDetector()
    feed(d, range(8), 0, 60, 2.0)  # cadence 2 s -> threshold max(10, 5*2) = 10 s
    assert run_checks(d, 0, 60) == []
    # rank 3 goes quiet at t=60, the others go on
    feed(d, [r for r in range(8) if r != 3], 60, 100, 2.0)
    evs = []
    t = 60.0
    while t < 100:
        evs.extend(d.check(t))
        t += 1.0
    stalls = [e for e in evs if isinstance(e, StallEvent)]
    assert [(e.rank, e.reason) for e in stalls] == [(3, "peers-continue")]
    assert 10 <= stalls[0].silent_s < 13
    assert stalls[0].node == "n0"
    assert stalls[0].to_dict()["event"] == "stall"
    d.observe(3, "n0", 100.5)
    cleared = d.check(101)
    assert [type(e) for e in cleared] == [StallCleared] and cleared[0].rank == 3
    assert cleared[0].to_dict() == {"event": "stall-cleared", "rank": 3}


def test_slow_logger_uses_its_own_cadence():
    d = StallDetector()
    feed(d, [0, 1, 2], 0, 300, 20.0)  # 20 s cadence -> threshold 100 s
    feed(d, [0, 1], 300, 380, 20.0)  # rank 2 silent for 80 s: not yet
    assert [e for e in run_checks(d, 300, 370) if isinstance(e, StallEvent)] == []
    feed(d, [0, 1], 380, 420, 20.0)
    evs = [e for e in run_checks(d, 380, 420) if isinstance(e, StallEvent)]
    assert [e.rank for e in evs] == [2]
    assert evs[0].silent_s >= 99


def test_all_stop_together_after_first_is_first_to_stop():
    d = StallDetector()
    feed(d, range(4), 0, 40, 2.0)
    # rank 1 stops at 40; the others log one more step at 42, then block in a collective
    feed(d, [0, 2, 3], 40, 44, 2.0)
    evs = run_checks(d, 44, 80)
    stalls = [e for e in evs if isinstance(e, StallEvent)]
    assert (1, "first-to-stop") in [(e.rank, e.reason) for e in stalls]
    assert all(e.rank in (1, None) for e in stalls)
    assert any(e.rank is None and e.reason == "all-silent" for e in stalls)


def test_ranks_stopping_together_name_nobody_but_raise_job_stall():
    d = StallDetector()
    feed(d, range(8), 0, 40, 2.0)
    evs = run_checks(d, 40, 80)
    stalls = [e for e in evs if isinstance(e, StallEvent)]
    assert [(e.rank, e.reason) for e in stalls] == [(None, "all-silent")]
    d.observe(5, "n0", 81)
    assert [(type(e), e.rank) for e in d.check(81.5)] == [(StallCleared, None)]


def test_one_late_straggler_does_not_flag_everyone():
    d = StallDetector()
    feed(d, range(8), 0, 40, 2.0)
    d.observe(7, "n0", 43)  # rank 7 printed one extra line after the others stopped
    stalls = [e for e in run_checks(d, 40, 80) if isinstance(e, StallEvent)]
    assert [e.rank for e in stalls] == [None]


def test_rank_that_hangs_at_startup_borrows_peer_cadence():
    d = StallDetector()
    d.observe(5, "n1", 0.0)
    d.observe(5, "n1", 0.1)  # two lines, then nothing: own cadence unknown
    feed(d, [0, 1, 2, 3], 0, 60, 2.0)
    stalls = [e for e in run_checks(d, 0, 60) if isinstance(e, StallEvent)]
    assert [(e.rank, e.node) for e in stalls] == [(5, "n1")]


def test_registered_rank_that_never_logs():
    d = StallDetector()
    d.register(9, "n2", 0.0)
    feed(d, [0, 1], 0, 60, 2.0)
    assert [e.rank for e in run_checks(d, 0, 60) if isinstance(e, StallEvent)] == [9]


def test_continuous_logger_floor():
    d = StallDetector()
    t = 0.0
    while t < 30:
        for r in (0, 1):
            d.observe(r, None, t)
        t += 0.1
    assert d.cadence(0) == 1.0
    while t < 45:
        d.observe(0, None, t)
        t += 0.1
    stalls = [e for e in run_checks(d, 30, 45, 0.5) if isinstance(e, StallEvent)]
    assert [e.rank for e in stalls] == [1]
    assert 10.0 <= stalls[0].silent_s <= 10.6


def test_no_stall_without_peers_or_cadence():
    d = StallDetector()
    d.observe(0, None, 0.0)
    assert d.check(1000.0) == []
    feed(d, [0], 0, 50, 2.0)
    assert d.check(1000.0) == []  # a single rank has no peers


# --- process table --------------------------------------------------------------


@dataclass(frozen=True)
class FakeProc:
    pid: int
    ppid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    cmdline: list
    create_time: float
    role: str = "worker"


def test_process_table_started_exited_and_pid_reuse(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    procs: dict[int, FakeProc] = {}

    def spawn(pid, rank, ct):
        (proc / str(pid)).mkdir(exist_ok=True)
        procs[pid] = FakeProc(pid, 1, rank, rank, 2, ["python", "train.py"], ct)

    def kill(pid):
        (proc / str(pid)).rmdir()
        procs.pop(pid)

    pt = ProcessTable(lambda: list(procs.values()), proc=str(proc),
                      create_time=lambda pid: procs[pid].create_time if pid in procs else None)
    spawn(100, 0, 1.0)
    spawn(101, 1, 1.0)
    ev = pt.sample()
    assert sorted((e.pid, e.rank, e.state) for e in ev) == [(100, 0, "started"), (101, 1, "started")]
    assert pt.sample() == []
    assert pt.full_samples == 1  # no new pid: the full discovery was skipped
    kill(101)
    ev = pt.check_exits()
    assert [(e.pid, e.rank, e.state) for e in ev] == [(101, 1, "exited")]
    assert ev[0].to_dict() == {"event": "process", "pid": 101, "rank": 1, "state": "exited", "local_rank": 1, "role": "worker"}
    # pid reuse: same pid, another process (different create_time) between two samples
    procs[100] = FakeProc(100, 1, 0, 0, 2, ["python", "train.py"], 50.0)
    ev = pt.sample(force=True)
    assert sorted((e.pid, e.state, e.create_time) for e in ev) == [(100, "exited", 1.0), (100, "started", 50.0)]


def test_process_table_with_real_probe_sees_a_worker_exit():
    env = dict(os.environ, RANK="3", LOCAL_RANK="3", WORLD_SIZE="4")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--local_rank=3"], env=env)
    try:
        pt = ProcessTable(interval=0.2, exit_interval=0.1)

        async def main():
            seen = []
            agen = pt.run()
            async for e in agen:
                seen.append(e)
                if e.pid == child.pid and e.state == "started":
                    child.kill()
                if e.pid == child.pid and e.state == "exited":
                    break
            await agen.aclose()
            return seen

        seen = asyncio.run(asyncio.wait_for(main(), 15))
    finally:
        child.kill()
        child.wait()
    mine = [e for e in seen if e.pid == child.pid]
    assert [e.state for e in mine] == ["started", "exited"]
    assert mine[0].rank == 3 and isinstance(mine[0], ProcessEvent)


def test_the_engines_process_table_keeps_only_the_jobs_processes(tmp_path):
    """Two training processes on the node: one runs in the job's folder, the other is another
    job's worker elsewhere. Only the first is the job's (it was shown as the job's rank too)."""
    from denpex_tui.live.engine import job_processes

    job, other = tmp_path / "job", tmp_path / "elsewhere"
    job.mkdir()
    other.mkdir()
    code = "import time; time.sleep(30)"
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="2")
    ours = subprocess.Popen([sys.executable, "-c", code, "--local_rank=0"], env=env, cwd=job)
    theirs = subprocess.Popen([sys.executable, "-c", code, "--local_rank=1"], env=dict(env, RANK="1", LOCAL_RANK="1"),
                              cwd=other)
    try:
        import time

        from denpex_tui.probes.processes import find_training_processes

        every: set[int] = set()
        deadline = time.monotonic() + 20
        while not {ours.pid, theirs.pid} <= every and time.monotonic() < deadline:  # both started
            every = {p.pid for p in find_training_processes()}  # what the table followed before
            time.sleep(0.05)
        found = {p.pid for p in job_processes([str(job)])()}
    finally:
        for c in (ours, theirs):
            c.kill()
            c.wait()
    assert ours.pid in found and theirs.pid in every
    assert theirs.pid not in found
