"""The scan's detached child is reaped as soon as it exits, woken by its exit rather than by a
25 ms poll (commands/process.py): every command's wall time paid that poll."""

from __future__ import annotations

import os
import time

import pytest

from denpex_tui.commands.process import _reap_soon


@pytest.mark.parametrize("delay", [0.0, 0.2])
def test_the_child_is_reaped_when_it_exits(delay):
    pid = os.fork()
    if pid == 0:
        time.sleep(delay)
        os._exit(3)
    t0 = time.monotonic()
    _reap_soon(pid, 30.0)
    took = time.monotonic() - t0
    with pytest.raises(ChildProcessError):  # reaped: no zombie left
        os.waitpid(pid, os.WNOHANG)
    assert took < 20.0  # woken by the exit, not by the 30 s bound


def test_a_child_that_stays_is_left_after_the_bound():
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    try:
        t0 = time.monotonic()
        _reap_soon(pid, 0.2)
        assert time.monotonic() - t0 < 10.0
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)  # still running, not waited for
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
