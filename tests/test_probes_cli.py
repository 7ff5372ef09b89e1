"""`denpex probe` end to end (subprocesses), plus the probes' invariants: no textual/rich in the
domain core, no network socket, read-only on watched paths, no escape sequence from a process or
a log reaching the terminal."""

from __future__ import annotations

import argparse
import io
import json
import os
import pty
import signal
import subprocess
import sys
import time

import pytest

from denpex_tui.commands import probe as cli
from helpers import readable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = "/work/shared/corpus"
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
ENV.pop("NO_COLOR", None)


def probe(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "denpex_tui.commands.probe", *args],
                          capture_output=True, text=True, timeout=timeout, env=env or ENV,
                          cwd=ROOT)


@pytest.fixture
def worker(tmp_path):
    """A process that looks like rank 0 of a job, with a hostile command line."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()",
                          "--note=\x1b[31mred\x1b]0;title\x07"],
                         stdin=subprocess.PIPE, env=dict(os.environ, RANK="0", LOCAL_RANK="0"))
    time.sleep(0.1)
    yield p
    p.kill()
    p.wait()
    p.stdin.close()


def test_json_snapshot_for_a_pid(worker, tmp_path):
    r = probe("--pid", str(worker.pid), "--path", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    j = json.loads(r.stdout)
    assert j["schema"] == 1 and isinstance(j["time"], str) and j["host"]
    [p] = j["processes"]
    assert p["pid"] == worker.pid and p["rank"] == 0 and p["readable"] is True
    # shown escaped as text, as everywhere: a raw ESC in JSON reaches the terminal via `jq -r`
    assert p["cmdline"][-1] == "--note=\\x1b[31mred\\x1b]0;title\\x07"
    assert "\x1b" not in r.stdout
    assert any(x["path"] == str(tmp_path) for x in j["paths"])


def _private_pid_namespace() -> list[str]:
    """A command prefix that runs in a fresh PID namespace with its own /proc: no process of
    this machine is visible there, whatever else runs on it."""
    for pre in (["unshare", "--pid", "--fork", "--mount-proc"],
                ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]):
        try:
            if subprocess.run([*pre, "true"], capture_output=True, timeout=30).returncode == 0:
                return pre
        except (OSError, subprocess.TimeoutExpired):
            continue
    pytest.skip("this machine does not allow a private PID namespace (unshare)")


def test_head_node_says_no_local_training_processes(tmp_path, worker):
    """Run where no training process is visible, even though one runs on this machine (the
    ``worker`` fixture, outside the namespace)."""
    alone = _private_pid_namespace()
    cmd = [*alone, sys.executable, "-m", "denpex_tui.commands.probe", "--path", str(tmp_path)]
    visible = json.loads(probe("--json").stdout)["processes"]
    assert any(p["pid"] == worker.pid for p in visible)  # outside: it is seen
    r = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT)
    j = json.loads(r.stdout)
    assert j["processes"] == [] and j["note"] == "no local training processes"
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "no local training processes" in r.stdout
    assert str(tmp_path) in r.stdout  # the shared paths are still shown
    assert "\x1b" not in r.stdout  # not a terminal: no colour


def test_human_view_escapes_what_processes_contain(worker):
    r = probe("--pid", str(worker.pid))
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "\\x1b[31mred" in r.stdout
    assert "rank 0" in r.stdout and "fds" in r.stdout


@pytest.mark.parametrize("args,msg", [
    (["--pid", "abc"], "--pid: 'abc' is not a process id"),
    (["--pid", "0"], "is not a process id"),
    (["--pid", str(2 ** 22 + 777)], "no such process"),
    (["--interval", "nope", "--stream"], "--interval: expected a number"),
    (["--interval", "0", "--stream"], "--interval: must be between"),
    (["--logs", "/nonexistent/denpex.log"], "--logs /nonexistent/denpex.log: no such file"),
])
def test_input_errors_exit_2_with_one_line(args, msg):
    r = probe(*args)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("denpex probe: ") and msg in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stream_until_signal(tmp_path, sig):
    p = subprocess.Popen([sys.executable, "-m", "denpex_tui.commands.probe", "--stream",
                          "--interval", "0.1", "--path", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                         cwd=ROOT)
    try:
        lines = [p.stdout.readline() for _ in range(3)]
        p.send_signal(sig)
        rest, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0 and "Traceback" not in err
    objs = [json.loads(x) for x in lines + rest.splitlines() if x.strip()]
    assert len(objs) >= 3
    assert all(o["schema"] == 1 and "trends" in o for o in objs)
    times = [o["unix_time"] for o in objs]
    assert times == sorted(times) and times[2] - times[0] >= 0.15


def test_stream_feeds_saves_from_logs_into_trends(tmp_path):
    # a rank that leaks 5 fds per checkpoint save, and its log
    log = tmp_path / "console.log"
    log.write_text("")
    code = (
        "import os, sys, time\n"
        "held = []\n"
        "log = open(sys.argv[1], 'a', buffering=1)\n"
        "for step in range(5):\n"
        "    time.sleep(0.45)\n"
        "    log.write('[default1]:2026-11-29 17:40:15,518 INFO [rank1/4] train: Saving "
        "checkpoint step %d\\n' % step)\n"
        "    time.sleep(0.15)\n"
        "    held += [os.open(os.devnull, os.O_RDONLY) for _ in range(5)]\n"
        "time.sleep(30)\n"
    )
    w = subprocess.Popen([sys.executable, "-c", code, str(log)],
                         env=dict(os.environ, RANK="1", LOCAL_RANK="1"))
    try:
        args = argparse.Namespace(pid=[str(w.pid)], path=[], logs=[str(log)], json=True,
                                  stream=True, interval="0.1", timeout="2", count="32")
        buf = io.StringIO()
        old = sys.stdout
        sys.stdout = buf
        try:
            assert cli.run(args) == 0
        finally:
            sys.stdout = old
        last = json.loads(buf.getvalue().splitlines()[-1])
        [pt] = [t for t in last["trends"]["processes"] if t["pid"] == w.pid]
        assert pt["saves_observed"] >= 4
        assert pt["fd_growth_per_save"] == pytest.approx(5.0)
        assert pt["eta_saves"] is not None and "fd limit reached in ~" in pt["eta"]
    finally:
        w.kill()
        w.wait()


@pytest.mark.skipif(not os.path.isdir(CORPUS), reason="shared corpus not present")
def test_logs_give_paths_and_differentials():
    r = probe("--logs", os.path.join(CORPUS, "shm_enospc_dataloader"),
              os.path.join(CORPUS, "fd_leak_emfile", "console.log"), "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    sigs = {d["signature"] for d in j["differentials"]}
    assert {"os.shm-enospc", "os.emfile"} <= sigs
    shm = [d for d in j["differentials"] if d["signature"] == "os.shm-enospc"][0]
    assert {c["cause"]: c["verdict"] for c in shm["candidates"]}["shm"] == "likely"
    assert all(d["note"] == "measured now, not at failure time" for d in j["differentials"])
    assert any(p["shm"] and any("log:" in w for w in p["why"]) for p in j["paths"])
    h = probe("--logs", os.path.join(CORPUS, "shm_enospc_dataloader"))
    assert "Differential: os.shm-enospc" in h.stdout and "measured now, not at failure time" in h.stdout


def test_colour_only_on_a_terminal_and_never_with_no_color(tmp_path):
    def on_pty(env):
        master, slave = pty.openpty()
        p = subprocess.Popen([sys.executable, "-m", "denpex_tui.commands.probe", "--path",
                              str(tmp_path)], stdout=slave, stderr=slave, env=env, cwd=ROOT)
        os.close(slave)
        out = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = [master] if readable(master, 0.2) else []
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            elif p.poll() is not None:
                break
        p.wait(timeout=10)
        os.close(master)
        return out

    assert b"\x1b[" in on_pty(ENV)
    assert b"\x1b" not in on_pty(dict(ENV, NO_COLOR="1"))


def test_probes_core_imports_no_ui_and_opens_no_network_socket(tmp_path):
    code = f"""
import socket, sys
real = socket.socket
class Guard(real):
    def __init__(self, family=-1, *a, **k):
        if family in (socket.AF_INET, socket.AF_INET6, -1):
            raise AssertionError("network socket opened")
        super().__init__(family, *a, **k)
socket.socket = Guard
import denpex_tui.probes.processes, denpex_tui.probes.readings, denpex_tui.probes.sampler
import denpex_tui.probes.trends, denpex_tui.core.conditions, denpex_tui.probes.differential
import denpex_tui.probes.logpaths, denpex_tui.probes.facade, denpex_tui.probes.mounts
import denpex_tui.commands.probe
from denpex_tui.probes.sampler import Prober
from denpex_tui.probes.differential import differential
from denpex_tui.probes.processes import find_training_processes
find_training_processes()
s = Prober(paths=[{str(tmp_path)!r}]).snapshot()
differential("os.enospc", {str(tmp_path)!r}, s, du=False)
differential("os.emfile", None, s)
bad = [m for m in sys.modules if m.split(".")[0] in ("textual", "rich")]
assert not bad, bad
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_probe_is_read_only(tmp_path, worker):
    d = tmp_path / "ckpt"
    (d / "global_step10").mkdir(parents=True)
    (d / "global_step10" / "mp_rank_00_model_states.pt").write_bytes(b"w" * 1000)
    log = tmp_path / "console.log"
    log.write_text(f"[Rank 0] Saving model checkpoint: {d}/global_step20/x.pt\n"
                   f"OSError: [Errno 28] No space left on device: '{d}/global_step20/x.pt'\n")

    def state():
        out = {}
        for root, dirs, files in os.walk(tmp_path):
            for n in dirs + files:
                st = os.lstat(os.path.join(root, n))
                out[os.path.join(root, n)] = (st.st_size, st.st_mtime_ns, st.st_mode)
        return out

    before = state()
    r = probe("--pid", str(worker.pid), "--path", str(d), "--logs", str(log), "--json")
    assert r.returncode == 0, r.stderr
    assert state() == before
    assert not (d / "global_step20").exists()
