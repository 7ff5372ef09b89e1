"""TrendTracker: fd growth per save, rates, and ETAs only for steady trends."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import pytest

from denpex_tui.probes.readings import PathReading, ProcessReading, Snapshot
from denpex_tui.probes.sampler import Prober
from denpex_tui.probes.trends import TrendTracker, fmt_duration, linfit


def snap(t, procs=(), paths=()):
    return Snapshot(time=t, host="h", processes=list(procs), paths=list(paths))


def proc(fds, soft=256, pid=42, rank=3, ct=1000.0):
    return ProcessReading(pid=pid, rank=rank, local_rank=rank, fds=fds, fd_soft_limit=soft,
                          fd_hard_limit=4096, create_time=ct, readable=True)


def path(free, inodes=None, p="/ckpt"):
    return PathReading(path=p, bytes_total=10 ** 12, bytes_free=free, inodes_total=10 ** 6,
                       inodes_free=inodes)


def test_linfit():
    s, i, r2 = linfit([0, 1, 2, 3], [1, 3, 5, 7])
    assert (s, i, r2) == (2.0, 1.0, 1.0)
    assert linfit([0, 1, 2], [5, 5, 5]) == (0.0, 5.0, 1.0)
    assert linfit([1], [1]) is None
    assert linfit([2, 2], [1, 3]) is None


def test_fd_growth_per_save_and_eta_in_saves():
    tr = TrendTracker()
    t = 0.0
    fds = 40
    # a save every 10 s; each leaks 30 fds (the corpus fd_leak_emfile rank 3 pattern)
    for k in range(5):
        for _ in range(5):
            tr.ingest(snap(t, [proc(fds)]))
            t += 2
        tr.note_checkpoint_save(3, t - 0.5)
        tr.note_checkpoint_save(None, t - 0.4)  # rank-0 log_dist line for the same save: merged
        fds += 30
    tr.ingest(snap(t, [proc(fds)]))
    pt = tr.process_trend(42)
    assert pt.saves_observed == 5
    assert pt.fd_growth_per_save == pytest.approx(30.0)
    assert pt.fd_save_fit.steady
    assert tr.fd_growth_per_save(42, 1000.0) == pytest.approx(30.0)
    # 190 fds now, soft 256: 66 left, 30 per save -> 3 saves
    assert pt.fds_now == 190 and pt.eta_saves == 3
    assert pt.save_interval_s == pytest.approx(10.0)
    assert pt.eta_seconds == pytest.approx(30.0)
    [line] = [x for x in tr.eta_lines() if "rank 3" in x]
    assert "fd limit reached in ~3 saves" in line


def test_no_eta_with_too_few_saves_or_no_growth():
    tr = TrendTracker()
    for k in range(2):
        tr.ingest(snap(k * 10.0, [proc(40 + 30 * k)]))
        tr.note_checkpoint_save(3, k * 10.0 + 5)
    pt = tr.process_trend(42)
    assert pt.eta_saves is None
    assert tr.fd_growth_per_save(42) is None  # < 3 pre-save points: not a metric yet

    tr = TrendTracker()
    for k in range(6):
        tr.ingest(snap(k * 10.0, [proc(40)]))
        tr.note_checkpoint_save(3, k * 10.0 + 5)
    pt = tr.process_trend(42)
    assert pt.fd_growth_per_save == 0.0 and pt.fd_save_fit.steady
    assert pt.eta_saves is None and pt.eta_seconds is None
    assert tr.eta_lines() == []


def test_unsteady_growth_gives_no_eta():
    rnd = random.Random(7)
    tr = TrendTracker()
    for k in range(8):
        tr.ingest(snap(k * 10.0, [proc(100 + rnd.choice([-40, 60, -20, 80, 0]))]))
        tr.note_checkpoint_save(3, k * 10.0 + 5)
    pt = tr.process_trend(42)
    assert not pt.fd_save_fit.steady
    assert pt.eta_saves is None


def test_saves_of_other_ranks_do_not_count():
    tr = TrendTracker()
    for k in range(5):
        tr.ingest(snap(k * 10.0, [proc(40 + 5 * k)]))
        tr.note_checkpoint_save(1, k * 10.0 + 5)
    assert tr.process_trend(42).saves_observed == 0
    tr.note_checkpoint_save(None, 100.0, local_rank=3)
    assert tr.process_trend(42).saves_observed == 1


def test_fd_time_rate_eta():
    tr = TrendTracker()
    for k in range(10):
        tr.ingest(snap(k * 2.0, [proc(100 + 4 * k, soft=1024)]))
    pt = tr.process_trend(42)
    assert pt.fd_rate_per_min == pytest.approx(120.0)
    # 136 now, 888 left at 2 fds/s
    assert pt.eta_seconds == pytest.approx(888 / 2.0)
    assert pt.eta_saves is None
    assert "fd limit reached in ~7 min" in tr.eta_lines()[0]


def test_disk_full_eta_only_when_steady():
    tr = TrendTracker()
    for k in range(3):
        tr.ingest(snap(k * 5.0, paths=[path(10 ** 9 - k * 10 ** 7, 5000 - k)]))
    assert tr.path_trend("/ckpt").eta_full_seconds is None  # 3 points: not enough
    for k in range(3, 8):
        tr.ingest(snap(k * 5.0, paths=[path(10 ** 9 - k * 10 ** 7, 5000 - k)]))
    pt = tr.path_trend("/ckpt")
    assert pt.bytes_free_rate == pytest.approx(-2 * 10 ** 6)
    assert pt.eta_full_seconds == pytest.approx((10 ** 9 - 7 * 10 ** 7) / (2 * 10 ** 6))
    assert pt.eta_inodes_seconds == pytest.approx((5000 - 7) * 5.0)
    texts = pt.eta_texts()
    assert texts[0].startswith("/ckpt: disk full in ~") and "inodes exhausted" in texts[1]


def test_a_full_disk_has_no_eta_it_is_full_already():
    # the demo's gauge said "100% FULL 0 B free" and "full in ~1 s" under it
    tr = TrendTracker()
    for k in range(8):
        tr.ingest(snap(k * 5.0, paths=[path(7 * 10 ** 7 - k * 10 ** 7, 6000 - 700 * k)]))
    pt = tr.path_trend("/ckpt")
    assert pt.bytes_free_now == 0 and pt.eta_full_seconds is None
    assert pt.eta_inodes_seconds is not None  # inodes are not out yet: their ETA still holds
    assert not any("disk full in" in t for t in pt.eta_texts())


def test_a_full_disk_is_not_full_in_1_s():
    # the demo's checkpoint disk: steadily filled, then at 0 B free; the gauge said
    # '100% FULL 0 B free' and beneath it 'full in ~1 s' (an ETA of 0 s, shown as at least 1 s)
    tr = TrendTracker()
    for k in range(8):
        tr.ingest(snap(k * 5.0, paths=[path(max(0, 7 * 10 ** 7 - k * 10 ** 7), max(0, 7 - k))]))
    pt = tr.path_trend("/ckpt")
    assert pt.bytes_free_now == 0 and pt.inodes_free_now == 0
    assert pt.eta_full_seconds is None and pt.eta_inodes_seconds is None
    assert not any("full in" in x or "exhausted in" in x for x in pt.eta_texts()), pt.eta_texts()


def test_noisy_free_space_gives_no_eta():
    rnd = random.Random(3)
    tr = TrendTracker()
    for k in range(30):
        tr.ingest(snap(k * 2.0, paths=[path(10 ** 9 + rnd.randint(-10 ** 8, 10 ** 8))]))
    pt = tr.path_trend("/ckpt")
    assert pt.eta_full_seconds is None and pt.bytes_free_rate is None


def test_restarted_process_is_a_new_series():
    tr = TrendTracker()
    for k in range(6):
        tr.ingest(snap(k * 2.0, [proc(100 + 10 * k)]))
    for k in range(6, 12):
        tr.ingest(snap(k * 2.0, [proc(20, ct=2000.0)]))  # same pid, new create_time
    assert tr.process_trend(42, 2000.0).fd_time_fit.slope == 0.0


def test_fmt_duration():
    assert fmt_duration(5) == "5 s"
    assert fmt_duration(600) == "10 min"
    assert fmt_duration(3 * 3600) == "3.0 h"
    assert fmt_duration(3 * 86400) == "3.0 d"


LEAKER = r"""
import os, sys
leaked = []
print("ready", flush=True)
for line in sys.stdin:
    n = int(line)
    for _ in range(n):  # a checkpoint writer that forgets to close its files
        leaked.append(os.open(os.devnull, os.O_RDONLY))
    print(len(os.listdir("/proc/self/fd")) - 1, flush=True)
"""


def test_real_process_leaking_per_save():
    p = subprocess.Popen([sys.executable, "-c", LEAKER], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, RANK="2", LOCAL_RANK="0"))
    try:
        assert p.stdout.readline().strip() == "ready"
        pr = Prober(pids=[p.pid], watch_shm=False)
        tr = TrendTracker(save_merge_s=0.001)
        for _save in range(4):
            tr.ingest(pr.snapshot())
            time.sleep(0.02)
            tr.note_checkpoint_save(2, time.time())
            p.stdin.write("7\n")
            p.stdin.flush()
            p.stdout.readline()
            time.sleep(0.02)
        s = pr.snapshot()
        tr.ingest(s)
        pt = tr.process_trend(p.pid)
        assert pt.fd_growth_per_save == pytest.approx(7.0)
        assert pt.fd_save_fit.steady
        soft = s.processes[0].fd_soft_limit
        assert pt.eta_saves == -(-(soft - s.processes[0].fds) // 7)
    finally:
        p.kill()
        p.wait()
        p.stdin.close()
        p.stdout.close()
