"""Signals and teardown: no --exec command outlives Denpex, no broken terminal, no stray
report. Checked by process group and by the last bytes written to the terminal."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from test_live_hostile import stalling_mount  # noqa: F401  (a fixture: a FUSE file that stops answering)
from helpers import readable

ENOSPC = "OSError: [Errno 28] No space left on device: '/ckpt/global_step100/mp_rank_00_model_states.pt'\n"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _wait_gone(pgid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return True
        time.sleep(0.05)
    return False


def _read_until(stream, pattern: bytes, timeout: float = 20.0) -> re.Match:
    buf = b""
    deadline = time.monotonic() + timeout
    fd = stream.fileno()
    while time.monotonic() < deadline:
        r = [fd] if readable(fd, 0.2) else []
        if fd in r:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            m = re.search(pattern, buf)
            if m:
                return m
    raise AssertionError(f"{pattern!r} not seen in {buf[-500:]!r}")


def _follow_with_exec(tmp_path, cmd="sleep 600"):
    log = tmp_path / "rank0.log"
    log.write_text("[rank0]: step 1\n")
    proc = subprocess.Popen([sys.executable, "-m", "denpex_tui", "scan", "--follow", "--exec", cmd, str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    m = _read_until(proc.stdout, rb"\[source\] added: exec: [^\n]*\(pid (\d+)")
    return proc, int(m.group(1)), log


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_follow_killed_by_a_signal_leaves_no_exec_command(tmp_path, sig):
    proc, pgid, _ = _follow_with_exec(tmp_path)
    try:
        assert _group_alive(pgid)
        proc.send_signal(sig)
        proc.wait(timeout=20)
        assert _wait_gone(pgid), f"the --exec command's group {pgid} survived {sig.name}"
    finally:
        if _group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_follow_whose_reader_went_away_leaves_no_exec_command(tmp_path):
    """`denpex scan --follow ... | head -1`: the reader closes the pipe, our next write
    gets SIGPIPE."""
    proc, pgid, log = _follow_with_exec(tmp_path)
    try:
        proc.stdout.close()
        with open(log, "a") as fh:  # a finding: an event to write into the closed pipe
            fh.write("[rank0]: " + ENOSPC)
        proc.wait(timeout=30)
        assert _wait_gone(pgid), f"the --exec command's group {pgid} survived SIGPIPE"
        assert b"Traceback" not in proc.stderr.read()
    finally:
        if _group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_a_busy_exec_at_exit_prints_no_event_loop_noise(tmp_path):
    proc, pgid, _ = _follow_with_exec(tmp_path, "yes '[rank1]: step 1 | loss 2.0421'")
    try:
        time.sleep(1.0)  # it writes as fast as it can
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert b"Event loop is closed" not in err and b"Exception ignored" not in err, err.decode()[-800:]
        assert _wait_gone(pgid)
    finally:
        if _group_alive(pgid):
            os.killpg(pgid, signal.SIGKILL)



def test_scan_killed_with_sigterm_takes_its_forked_worker_with_it(stalling_mount):
    """`denpex scan SLOWDIR & kill -TERM $!`: the parent exits at once (143), and the forked
    worker must not write its report to the shell when its read times out later. (A
    process blocked in a FUSE read the daemon never answers cannot finish dying until it
    answers: the kernel keeps it, and the pipe, until the unmount; it must never write.)"""
    proc = subprocess.Popen([sys.executable, "-m", "denpex_tui", "scan", "--io-timeout", "2",
                             str(stalling_mount / "rank3.log")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.5)  # the worker is reading, then blocked on the mount
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
    out, err = _collect(proc.stdout, 4.0), _collect(proc.stderr, 0.2)  # past the 2 s time-out
    assert out == b"" and b"no progress" not in err, (out[-300:], err[-300:])
    subprocess.run(["fusermount3", "-u", "-z", str(stalling_mount)], capture_output=True)
    from test_live_hostile import STALL_DAEMONS

    for d in STALL_DAEMONS:
        d.kill()  # the blocked read fails: the killed worker can finish dying
    assert _collect(proc.stdout, 10.0, until_eof=True) == b""


def _collect(stream, timeout: float, until_eof: bool = False) -> bytes:
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = [stream] if readable(stream, 0.1) else []
        if r:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                return buf
            buf += chunk
    if until_eof:
        raise AssertionError(f"no EOF after {timeout} s: the worker is still alive ({buf[-300:]!r})")
    return buf


# --- watch in a real pseudo-terminal ------------------------------------------------------

class Pty:
    def __init__(self, args):
        import fcntl
        import pty
        import struct
        import termios
        import threading

        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
        # a session of its own whose controlling terminal is the pty, as sshd sets it up:
        # closing the master side then sends SIGHUP
        self.proc = subprocess.Popen([sys.executable, "-m", "denpex_tui", "watch", "--no-probes", *args],
                                     stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                     preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
                                     env=dict(os.environ, TERM="xterm-256color"))
        os.close(slave)
        self.out = bytearray()
        self._t = threading.Thread(target=self._drain, daemon=True)
        self._t.start()

    def _drain(self):
        while True:
            try:
                r = [self.master] if readable(self.master, 0.2) else []
                if r:
                    data = os.read(self.master, 65536)
                    if not data:
                        return
                    self.out += data
            except OSError:
                return

    def wait_for(self, needle: bytes, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while needle not in self.out:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"{needle!r} not written to the terminal: {bytes(self.out[-400:])!r}")
            time.sleep(0.05)

    def close(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        try:
            os.close(self.master)
        except OSError:
            pass


def _exec_groups(pid: int) -> set[int]:
    import psutil

    try:
        return {os.getpgid(c.pid) for c in psutil.Process(pid).children(recursive=True)
                if "sleep" in " ".join(c.cmdline())}
    except (psutil.ZombieProcess, psutil.NoSuchProcess, ProcessLookupError):
        return set()  # watch has ended (the caller says so) or a child went meanwhile


@pytest.mark.parametrize("how", ["hangup", "SIGHUP", "SIGPIPE"])
def test_watch_whose_terminal_goes_away_leaves_no_exec_command(tmp_path, how):
    log = tmp_path / "rank0.log"
    log.write_text("[rank0]: step 1\n")
    t = Pty(["--exec", "sleep 600", str(log)])
    try:
        t.wait_for(b"\x1b[?1049h")
        deadline = time.monotonic() + 20
        while t.proc.poll() is None and not _exec_groups(t.proc.pid):
            assert time.monotonic() < deadline, "the --exec command did not start"
            time.sleep(0.1)
        assert t.proc.poll() is None, f"watch ended ({t.proc.returncode}) before the test's signal: {bytes(t.out[-600:])!r}"
        groups = _exec_groups(t.proc.pid)
        if how == "hangup":
            os.close(t.master)  # an ssh disconnect: the terminal's master side is closed
        else:
            t.proc.send_signal(getattr(signal, how))
        t.proc.wait(timeout=20)
        for g in groups:
            assert _wait_gone(g), f"the --exec command's group {g} survived ({how})"
    finally:
        for g in _exec_groups(t.proc.pid) if t.proc.poll() is None else ():
            os.killpg(g, signal.SIGKILL)
        t.close()


def test_sigterm_to_watch_restores_the_terminal_and_removes_the_demo_folder(tmp_path):
    import glob
    import tempfile

    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "denpex-demo-*")))
    t = Pty(["--demo"])
    try:
        t.wait_for(b"\x1b[?1049h")
        t.wait_for(b"\x1b[?1000h")  # mouse tracking on
        demo = set(glob.glob(os.path.join(tempfile.gettempdir(), "denpex-demo-*"))) - before
        assert len(demo) == 1
        t.proc.send_signal(signal.SIGTERM)
        t.proc.wait(timeout=20)
        time.sleep(0.3)  # the last bytes reach the master side
        tail = bytes(t.out[-2000:])
        assert tail.rfind(b"\x1b[?1049l") > tail.rfind(b"\x1b[?1049h"), f"still in the alternate screen: {tail[-300:]!r}"
        assert tail.rfind(b"\x1b[?1000l") > tail.rfind(b"\x1b[?1000h"), f"mouse tracking left on: {tail[-300:]!r}"
        assert not any(os.path.exists(d) for d in demo), "the demo's temporary folder was left behind"
    finally:
        t.close()


def _spool_dirs(tmpdir) -> list:
    return sorted(p for p in tmpdir.iterdir() if p.name.startswith("denpex-view-"))


@pytest.mark.parametrize("how", ["q", "SIGTERM", "SIGHUP"])
def test_watch_exec_spool_is_capped_and_removed(tmp_path, how):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmpdir)  # where watch makes its spool (Pty passes os.environ)
    try:
        t = Pty(["--exec-view-max", "1", "--exec", "yes '[rank0]: step 1 | loss 2.0421 | lr 3.000e-04'"])
    finally:
        if old is None:
            os.environ.pop("TMPDIR")
        else:
            os.environ["TMPDIR"] = old
    try:
        t.wait_for(b"\x1b[?1049h")
        deadline = time.monotonic() + 60
        marker = b"dropped from the view so far"
        while True:
            dirs = _spool_dirs(tmpdir)
            files = [f for d in dirs for f in d.iterdir()]
            if files and any(marker in f.read_bytes()[-4096:] for f in files):
                break
            assert time.monotonic() < deadline, "the spool never reached its cap"
            time.sleep(0.2)
        time.sleep(2)  # `yes` goes on writing: the spool must not grow
        size = sum(f.stat().st_size for d in _spool_dirs(tmpdir) for f in d.iterdir())
        assert size <= (1 << 20) + 64 * 1024, size
        if how == "q":
            os.write(t.master, b"q")
        else:
            t.proc.send_signal(getattr(signal, how))
        t.proc.wait(timeout=30)
        left = {d.name: sorted(f.name for f in d.iterdir()) for d in _spool_dirs(tmpdir)}
        assert not left, f"the spool folder was left behind after {how} (exit {t.proc.returncode}): {left}"
    finally:
        t.close()


def test_no_spool_folder_outlives_remove_all(tmp_path, monkeypatch):
    """watch's signal path (remove_all, on the main thread or the last-resort timer that ends
    the process) races the view's worker, which may be closing its spool or adding a source's
    file: once remove_all returns no folder is left, and none is made after it."""
    import tempfile
    import threading

    from denpex_tui.app import spool

    monkeypatch.setattr(spool, "_ENDED", False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real_rmtree = spool.shutil.rmtree
    started = threading.Event()

    def slow_rmtree(path, *a, **kw):  # the worker's removal is half-way when remove_all comes
        started.set()
        time.sleep(0.3)
        real_rmtree(path, *a, **kw)

    closing, adding = spool.Spool(), spool.Spool()
    closing.write(closing.path(0), ["[rank0]: step 1 | loss 2.0421 | lr 3.000e-04"])
    adding.write(adding.path(0), ["[rank1]: step 1 | loss 2.0421 | lr 3.000e-04"])
    monkeypatch.setattr(spool.shutil, "rmtree", slow_rmtree)
    worker = threading.Thread(target=closing.close)
    worker.start()
    assert started.wait(10)
    spool.remove_all()
    assert [p.name for p in tmp_path.iterdir()] == []
    worker.join(10)
    with pytest.raises(OSError):
        adding.path(1)  # a source the worker was still adding: no folder after the end
    with pytest.raises(OSError):
        spool.Spool().path(0)
    assert [p.name for p in tmp_path.iterdir()] == []
