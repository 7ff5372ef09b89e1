"""Errors are one line; numbers from logs are only numbers when they are sane.

Each test is a row of the README's "Hostile input" table.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import CORPUS, readable

ENOSPC = "OSError: [Errno 28] No space left on device: '/ckpt/global_step100/mp_rank_0{r}_model_states.pt'"
HUGE = "1" * 4301  # one digit more than Python's int-from-str limit


def run(*args, stdin=None, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "denpex_tui", *map(str, args)], capture_output=True, text=True,
                          input=stdin, env=env, timeout=timeout)


def one_line_error(r, exit_code=2) -> str:
    assert r.returncode == exit_code, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("denpex"), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


# -- errors ---------------------------------------------------------------------------------


def test_an_age_beyond_the_clock_is_one_line():
    line = one_line_error(run("scan", "--since", "99999999999999d", CORPUS / "fd_leak_emfile"))
    assert "--since" in line and "200 years" in line
    line = one_line_error(run("scan", "--since", "9" * 5000 + "s", CORPUS / "fd_leak_emfile"))
    assert "--since" in line
    assert run("scan", "--since", "30000d", "--json", CORPUS / "fd_leak_emfile").returncode == 1


BOOM = r"""
import sys
from denpex_tui.commands import cli
def boom(args, cfg):
    raise RuntimeError("boom: something we did not foresee")
cli.{name} = boom
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("name,args", [("cmd_scan", ["scan", "."]), ("cmd_signatures", ["signatures"])])
def test_an_internal_error_is_one_line_and_its_traceback_only_in_the_debug_log(tmp_path, name, args):
    """The forked scan and the in-process commands: one line on screen, never logging's
    last-resort traceback; with --debug the details go to the file."""
    code = BOOM.replace("{name}", name)
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    line = one_line_error(r)
    assert "internal error: RuntimeError: boom" in line and "--debug" in line
    dbg = tmp_path / "d.log"
    r = subprocess.run([sys.executable, "-c", code, "--debug", str(dbg), *args], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    one_line_error(r)
    text = dbg.read_text()
    assert "Traceback" in text and "RuntimeError: boom" in text


def test_debug_on_a_full_filesystem_a_folder_and_before_the_command(tmp_path):
    log = CORPUS / "fd_leak_emfile"
    r = run("--debug", "/dev/full", "scan", "--json", log)  # every write fails with ENOSPC
    assert r.returncode == 1 and json.loads(r.stdout)["incidents"]
    assert "Logging error" not in r.stderr and "Traceback" not in r.stderr
    assert "--debug /dev/full: cannot write (No space left on device); the debug log is off" in r.stderr
    line = one_line_error(run("--debug", tmp_path, "scan", log))
    assert "is a directory" in line
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    r = run("--debug", "scan", "--json", log, env=env)  # 'scan' is the command, not the file
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["incidents"]
    assert not (Path.cwd() / "scan").exists()
    assert "debug log started" in (tmp_path / "state" / "denpex" / "debug.log").read_text()
    ck = tmp_path / "ckpt"
    ck.mkdir()
    r = run("--debug", "checkpoints", "--json", ck, env=env)  # every command, not only scan
    assert "Traceback" not in r.stderr and not (Path.cwd() / "checkpoints").exists(), r.stderr
    assert "no checkpoint tags found" in r.stderr, r.stderr  # the command ran


def test_explain_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    for path, kind in ((fifo, "a FIFO"), ("/dev/null", "a device"), (tmp_path, "a directory")):
        line = one_line_error(run("explain", path, timeout=30))
        assert f"not a regular file ({kind})" in line
    assert time.monotonic() - t0 < 30  # never waits for a writer


# -- numbers --------------------------------------------------------------------------------


def _huge_job(tmp_path: Path) -> Path:
    """Real ENOSPC lines on ranks 1 and 3; rank-like prefixes of 4 301 digits on others, and a
    file whose name carries a 200-digit 'rank'."""
    d = tmp_path / "job"
    d.mkdir()
    (d / "rank1.log").write_text("[rank1]: " + ENOSPC.format(r=1) + "\n")
    (d / "console.log").write_text(f"[rank{HUGE}]: " + ENOSPC.format(r=0) + "\n"
                                   f"[default{HUGE}]: " + ENOSPC.format(r=2) + "\n"
                                   "[rank3]: " + ENOSPC.format(r=3) + "\n")
    (d / ("rank" + "9" * 200 + ".log")).write_text(f"[default{HUGE}]: step 60\n[rank{HUGE}]: step 61\n")
    (d / "paths.log").write_text(f"OSError: [Errno {HUGE}] No space left on device: '/ckpt/x.pt'\n"
                                 f"deepspeed_aio: open for write failed on /nvme/x.swp error = {HUGE}\n")
    return d


def test_huge_numbers_in_every_command(tmp_path):
    """A rank, pid, step or errno of 4 301 digits is not one: that prefix is ignored for that
    line and the rest of the job is scanned, in every command."""
    job = _huge_job(tmp_path)
    r = run("scan", "--no-measure", job)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    r = run("scan", "--json", "--no-measure", job)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    ranks = {f["rank"] for f in doc["findings"] if f["signature"] == "os.enospc"}
    assert {1, 3} <= ranks
    assert all(isinstance(x, int) and 0 <= x < 10**7 for x in ranks if x is not None)
    r = run("explain", job / "console.log")
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert "No space left on device" in r.stdout
    r = run("probe", "--json", "--logs", job)
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)

    p = subprocess.Popen([sys.executable, "-m", "denpex_tui", "scan", "--follow", "--json", str(job)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = b""
    os.set_blocking(p.stdout.fileno(), False)
    end = time.monotonic() + 60
    while time.monotonic() < end and b'"complete": true' not in out:  # the whole history is read
        readable(p.stdout, 0.2)
        out += p.stdout.read() or b""
    p.send_signal(signal.SIGINT)
    rest, err = p.communicate(timeout=20)
    out += rest or b""
    assert b"Traceback" not in err, err.decode()[-2000:]
    found = {json.loads(ln).get("rank") for ln in out.splitlines() if b'"event": "finding"' in ln}
    assert {1, 3} <= found, out.decode()[-2000:]
