"""Ordinary failures cost linear time, and many failing ranks bounded memory (issue 19, items 7
and 13).

Real messages (failure-messages.md D15 and D5) repeated the way big jobs repeat them: one rank's
NCCL WARN for every failed work request; every rank of a 10,000-rank job failing to attach its own
NCCL shared-memory segment; a rank logging 100,000 timestamped error lines no signature knows.
Each is a whole ``denpex scan`` in a fresh process (the fork that detaches it from the shell left
out, so the work is that process's). Before: >60 s, 178 s and 28-37 s; now 0.5-1.8 s here. The
bounds leave room for a loaded machine and still catch the quadratic cost by a wide margin."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

WARN = ("node-a:3487:3550 [0] NCCL WARN NET/IB : Got completion from peer 10.42.0.2<47534> with error 12, "
        "opcode 48, len 32764, vendor err 129\n")
SHM = "[rank{r}]: Error while attaching to shared memory segment /dev/shm/nccl-{tag} (size 9637888)\n"
UNKNOWN = "2026-11-29 17:{m:02d}:{s:02d},{ms:03d} ERROR [rank0/4] train: batch {i} could not be collated\n"
BOUND_S = 15.0


def _scan(path: Path) -> tuple[str, float, int]:
    """(stdout, wall seconds, peak RSS in MiB) of ``denpex scan PATH`` in a fresh process."""
    code = (
        "import re, sys\n"
        "from denpex_tui.commands import cli\n"
        "cli.detached = lambda fn: fn()  # in this process, to measure its peak\n"
        f"rc = cli.main(['scan', {str(path)!r}])\n"
        "sys.stdout.flush()\n"
        "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "print(f'@@HWM {hwm}', file=sys.stderr)\n"
    )
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t
    hwm = [int(x.split()[1]) for x in p.stderr.splitlines() if x.startswith("@@HWM ")]
    assert hwm, p.stderr[-2000:]
    return p.stdout, took, hwm[0] // 1024


def _shm_job(path: Path, ranks: int) -> None:
    rnd = random.Random(3)
    abc = "abcdefghijklmnopqrstuvwxyzABCDEF0123456789"
    with open(path, "w") as fh:
        for r in range(ranks):
            fh.write(SHM.format(r=r, tag="".join(rnd.choice(abc) for _ in range(6))))


@pytest.mark.parametrize("case", ["nccl-warn", "shm-ranks", "unknown-errors"])
def test_ordinary_failures_cost_linear_time(tmp_path: Path, case: str) -> None:
    log = tmp_path / "console.log"
    if case == "nccl-warn":
        log.write_text(WARN * 20_000)
        want = "NCCL NET/IB: completion error from a peer"
    elif case == "shm-ranks":
        _shm_job(log, 10_000)
        want = "rank 0 initiating: NCCL: could not create, extend or attach a /dev/shm segment"
    else:
        log.write_text("".join(UNKNOWN.format(m=40 + i // 360_000 % 20, s=i // 6000 % 60, ms=i % 1000, i=i)
                               for i in range(100_000)))
        want = "these lines look like errors"
    out, took, _mib = _scan(log)
    assert want in out, out[:1500]
    assert "skipped" not in out  # nothing is left unread for want of time
    assert took < BOUND_S, f"{case}: {took:.1f} s"


def test_many_failing_ranks_fold_and_keep_memory_bounded(tmp_path: Path) -> None:
    """20,000 ranks failing of one cause: the report folds them; 140 -> 110 MiB here."""
    log = tmp_path / "console.log"
    _shm_job(log, 20_000)
    out, _took, mib = _scan(log)
    assert "19,999 same cause" in out
    assert len(out.splitlines()) < 120  # folded: not one block per rank
    assert mib < 180, f"peak RSS {mib} MiB"
