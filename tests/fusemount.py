"""Mount one of the tests' FUSE filesystems (``fusefs.py``, ``fuse_stall.py``) for a test.

Skips when this machine cannot mount FUSE (no mfusepy/libfuse3, no /dev/fuse or fusermount3,
or the mount does not come up): what the test needs is missing, not a Denpex bug.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


@contextmanager
def fuse_mount(script: str, where: Path, daemons: list | None = None) -> Iterator[Path]:
    """Run ``tests/<script>`` mounted at ``where/mnt``; unmount and stop it at the end. The
    daemon's process is in ``daemons`` while mounted (a test may end it early)."""
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        pytest.skip(f"FUSE tests need mfusepy and libfuse3 (apt-get install fuse3): {exc}")
    if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        pytest.skip("no /dev/fuse or fusermount3 on this machine")
    mnt = where / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name(script)), str(mnt)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while not os.path.ismount(mnt):
        if proc.poll() is not None:
            pytest.skip(f"cannot mount FUSE here: {proc.stderr.read().decode()[-200:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.skip("FUSE mount did not come up")
        time.sleep(0.05)
    if daemons is not None:
        daemons.append(proc)
    try:
        yield mnt
    finally:
        if daemons is not None:
            daemons.remove(proc)
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        proc.kill()
        proc.wait(timeout=10)
