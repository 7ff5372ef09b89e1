"""Quiet when nothing happens: the bytes ``denpex watch`` writes to a real pseudo-terminal while
a finished job is on screen (bench/quiet_bytes.py measures the same over 60 s)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench", "quiet_bytes.py")
CORPUS = os.path.join(os.path.dirname(__file__), "fixtures", "corpus", "enospc_checkpoint_fastfail")


def test_a_quiet_finished_job_writes_nothing_after_its_first_frames():
    out = subprocess.run([sys.executable, BENCH, "--seconds", "6", "--settle", "20", "--size", "120x36", CORPUS,
                          "--no-probes", "--quiet-after", "2"], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    m = re.search(r"first \d+ s: (\d+) bytes; then (\d+) bytes", out)
    assert m, out
    first, then = int(m.group(1)), int(m.group(2))
    assert first > 10_000, out  # it did draw the job
    # the elapsed clock shows minutes once the job is quiet: at most one tick in 6 s
    assert then <= 1500, out
