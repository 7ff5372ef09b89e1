"""Regressions of earlier hostile-input tables (issue 19, item 13): `explain` on a real
RecursionError traceback, and a SIGTERM that reaches `scan` in its first half second on a job big
enough for the process pool."""

import os
import signal
import subprocess
import sys
import time

import pytest

from denpex_tui.core import history as scan_mod

pytestmark = pytest.mark.timeout(300)


def _real_traceback(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    return r.stderr


@pytest.mark.parametrize("code,marker", [
    ("def f(n): return f(n + 1)\nf(0)", "more times]"),
    ("def f(n):\n    if n == 4: raise ValueError('bad shard count')\n    return f(n + 1)\nf(0)", "1 more time]"),
])
def test_explain_types_a_folded_recursion_traceback_by_its_exception(tmp_path, code, marker):
    tb = _real_traceback(code)
    assert f"[Previous line repeated" in tb and marker in tb  # CPython's own fold
    exc = tb.strip().splitlines()[-1].split(":", 1)[0]
    for text in (tb, "".join(f"[rank3]: {x}\n" for x in tb.splitlines())):
        p = tmp_path / "tb.txt"
        p.write_text(text)
        r = subprocess.run([sys.executable, "-m", "denpex_tui", "explain", str(p)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 1, r.stderr
        assert f"uncaught {exc}." in r.stdout and "Previous line" not in r.stdout.splitlines()[0], r.stdout


@pytest.fixture(scope="module")
def big_job(tmp_path_factory):
    """16 rank files of 16 MiB each: past the scan's parallel threshold, so it forks a pool."""
    d = tmp_path_factory.mktemp("bigjob")
    for r in range(16):
        line = (f"2026-11-29 17:40:10,927 INFO [rank{r}/16] train: step %07d | loss 2.0421 | lr 3.000e-04 "
                f"| tokens/s 182311\n")
        block = "".join(line % i for i in range(20_000)).encode()
        with open(d / f"rank{r}.log", "wb") as fh:
            while fh.tell() < 16 << 20:
                fh.write(block)
            if r == 5:
                fh.write(b"[rank5]: OSError: [Errno 28] No space left on device: '/ckpt/x.pt'\n")
    assert sum(f.stat().st_size for f in d.iterdir()) >= 4 * scan_mod.PARALLEL_MIN_BYTES
    return d


def _ours(tag: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if tag.encode() in cmd and b"denpex_tui" in cmd and state != "Z":
            out.append(int(pid))
    return out


@pytest.mark.parametrize("after", [0.05, 0.25, 0.4, 0.7, 1.2])
def test_sigterm_early_in_a_parallel_scan_leaves_no_worker(big_job, after):
    p = subprocess.Popen([sys.executable, "-m", "denpex_tui", "scan", "--jobs", "2", str(big_job)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(after)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=30)
    assert p.returncode != 0 or b"rank 5" in out
    deadline = time.monotonic() + 5
    left = _ours(str(big_job))
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _ours(str(big_job))
    assert left == [], f"{len(left)} scan processes left {after} s after the start"


def test_a_parallel_scan_that_is_not_signalled_still_finishes(big_job):
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "scan", "--jobs", "2", str(big_job)], capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 1 and "rank 5 initiating" in r.stdout, r.stderr
