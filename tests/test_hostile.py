"""Hostile input: what Denpex reads cannot break it, drive the terminal, or reach a shell.

Each test is one row of the README's "Hostile input" table.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from denpex_tui.core.scan import scan_paths
from helpers import CORPUS

DANGEROUS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Real lines from the corpus, with escape sequences spliced in.
ENOSPC = "OSError: [Errno 28] No space left on device: '/ckpt/global_step100/mp_rank_00_model_states.pt'"
INJECT = [
    "\x1b]52;c;cm0gLXJmIH4vKgo=\x07",  # OSC 52: write the clipboard
    "\x1b]0;pwned\x07",  # OSC 0: window title
    "\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    "\x1b[2J\x1b[H",  # CSI 2J: clear screen
    "\x1bP1$r0m\x1b\\",  # DCS
    "\u009b31m\u009d0;x\u009c",  # C1 controls (8-bit CSI, OSC, ST)
    "\x07\x08\x08\x08\rOK     ",  # BEL, backspace, carriage-return overwrite
]


def run(*args, stdin=None, **kw):
    return subprocess.run([sys.executable, "-m", "denpex_tui", *args], capture_output=True, input=stdin,
                          timeout=120, **kw)


def _hostile_job(tmp_path: Path) -> Path:
    d = tmp_path / "job" / "logs" / "run_x" / "attempt_0"
    for r in range(2):
        (d / str(r)).mkdir(parents=True)
    bad = "".join(INJECT)
    (d / "0" / "stderr.log").write_text(
        "[rank0]: Traceback (most recent call last):\n"
        f'[rank0]:   File "/app/{bad}train.py", line 1, in <module>\n'
        f"[rank0]: OSError: [Errno 28] No space left on device: '/ckpt/{bad}/x.pt'\n"
    )
    (d / "1" / "stdout.log").write_text(f"2026-11-29 17:40:16,343 INFO [rank1/2] train: step 60 {bad}\n")
    return tmp_path / "job"


def test_escape_sequences_never_reach_the_terminal_scan_explain_json(tmp_path):
    job = _hostile_job(tmp_path)
    outs = []
    for args in (["scan", str(job)], ["scan", "--json", str(job)], ["scan", "--verbose", str(job)]):
        r = run(*args)
        assert r.returncode == 1, r.stderr
        outs += [r.stdout, r.stderr]
    tb = (job / "logs/run_x/attempt_0/0/stderr.log").read_bytes()
    for args in (["explain", "-"], ["explain", "--json", "-"]):
        r = run(*args, stdin=tb)
        outs += [r.stdout, r.stderr]
    for out in outs:
        text = out.decode("utf-8", "replace")
        # Rich emits no colour when not on a terminal, so no ESC may appear at all.
        assert "\x1b" not in text
        assert not DANGEROUS.search(text.replace("\n", "").replace("\t", ""))
    doc = json.loads(run("scan", "--json", str(job)).stdout)
    dump = json.dumps(doc, ensure_ascii=False)
    assert "\x1b" not in dump and "\u009b" not in dump


def test_escape_sequences_on_a_real_terminal_are_only_sgr(tmp_path):
    """Even forced colour output (a terminal) carries only Denpex's own SGR sequences."""
    job = _hostile_job(tmp_path)
    env = dict(os.environ, FORCE_COLOR="1", TERM="xterm-256color", COLUMNS="200")
    env.pop("NO_COLOR", None)
    r = run("scan", str(job), env=env)
    text = r.stdout.decode()
    others = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert "\x1b" not in others and "\x07" not in others


def test_file_names_with_escapes_are_shown_escaped(tmp_path):
    d = tmp_path / "j"
    d.mkdir()
    (d / "rank3\x1b]0;x\x07.log").write_text(ENOSPC + "\n")
    r = run("scan", "--json", str(d))
    assert r.returncode == 1
    assert b"\x1b" not in r.stdout and b"\x07" not in r.stdout
    assert "\\x1b]0;x\\x07" in json.loads(r.stdout)["sources"][0]["path"]


@pytest.mark.parametrize(
    "value",
    ["/ckpt/$(reboot)", "/ckpt/`id`", "/ckpt/a;rm -rf ~", "-rf", "/ckpt/it's", "/ckpt/\x1b[201~rm -rf ~",
     "/ckpt/a\nrm -rf ~"],
)
def test_paths_from_logs_stay_one_shell_word_in_commands(tmp_path, value):
    import shlex

    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.core.fixes import fix_panel

    log = tmp_path / "rank0.log"
    log.write_bytes(f"OSError: [Errno 28] No space left on device: '{value}/x.pt'\n".encode())
    r = scan_paths([str(log)], include_user=False)
    panel = fix_panel(r.incidents[0].initiating, load_catalog(include_user=False), r.job)
    assert panel.commands
    dir_value = value  # the error's path is value + "/x.pt"
    for c in panel.commands:
        assert not DANGEROUS.search(c.text)
        if not c.complete:
            assert re.search(r"<(dir|path|ckpt_dir)>", c.text), c.text
            continue
        words = shlex.split(c.text)
        assert "rm" not in words and "reboot" not in words, c.text
        for w in words:
            if any(m in w for m in ("reboot", "`id`", "rm -rf", "it's", "a;rm")):
                assert w in (dir_value, "./" + dir_value, dir_value + "/x.pt", "./" + dir_value + "/x.pt"), (w, c.text)
    if "\n" in value or "\x1b" in value:
        assert any(not c.complete for c in panel.commands)


def test_user_pack_redos_pattern_cannot_hang_a_scan(tmp_path):
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "team.redos.toml").write_text(
        "schema = 1\nid = 'team.redos'\ntitle = 'x'\nfamily = 'team'\nphase = 'any'\nrole = 'initiating'\n"
        "severity = 'error'\npatterns = ['Errno (a+)+b']\ncause = 'x'\nsymptoms = ['x']\nfix = ['x']\n"
    )
    log = tmp_path / "rank0.log"
    log.write_text("Errno " + "a" * 200_000 + "!\n")
    t0 = time.perf_counter()
    r = run("scan", "--signatures", str(pack), str(log))
    assert time.perf_counter() - t0 < 30
    assert r.returncode == 0, r.stderr


def test_user_pack_strings_with_escapes_are_refused(tmp_path):
    from denpex_tui.core.catalog import load_pack

    (tmp_path / "team.x.toml").write_text(
        "schema = 1\nid = 'team.x'\ntitle = \"evil \\u001b]52;c;eA==\\u0007\"\nfamily = 'team'\nphase = 'any'\n"
        "role = 'initiating'\nseverity = 'error'\npatterns = ['team failure']\ncause = 'x'\nsymptoms = ['x']\nfix = ['x']\n"
    )
    sigs, problems = load_pack(tmp_path)
    assert sigs == [] and "field 'title': contains a control character" in str(problems[0])


# -- malformed bytes ------------------------------------------------------------------------


def test_malformed_bytes_do_not_crash(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "invalid-utf8.log").write_bytes(b"\xff\xfe\xfd bad\n" + ENOSPC.encode() + b"\n")
    (d / "nul.log").write_bytes(b"ok\x00line\n" * 3 + ENOSPC.encode() + b"\n")
    (d / "utf16.log").write_bytes(("\ufeff" + ENOSPC + "\r\n").encode("utf-16-le"))
    (d / "crlf.log").write_bytes(ENOSPC.encode() + b"\r\n")
    (d / "mixed.log").write_bytes("caf\u00e9 ".encode("latin-1") + "caf\u00e9 ".encode() + ENOSPC.encode() + b"\n")
    (d / "model.bin.log").write_bytes(os.urandom(64 << 10))
    (d / "empty.log").write_bytes(b"")
    r = scan_paths([str(d)], include_user=False)
    by_file = {Path(f.path).name for f in r.findings if f.signature == "os.enospc"}
    assert {"invalid-utf8.log", "nul.log", "utf16.log", "crlf.log", "mixed.log"} <= by_file
    assert any("binary file" in w for w in r.warnings)


def test_a_200mb_line_without_newline_keeps_memory_bounded(tmp_path):
    big = tmp_path / "rank0.log"
    with open(big, "wb") as fh:
        fh.write(ENOSPC.encode() + b"\n")
        chunk = b"x" * (1 << 20)
        for _ in range(200):
            fh.write(chunk)
    # VmHWM is this process's own peak (ru_maxrss would carry the high-water mark of the
    # pytest process it was forked from across exec).
    code = (
        "import re;from denpex_tui.core.scan import scan_paths;"
        f"r=scan_paths([{str(big)!r}],include_user=False);"
        "hwm=re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1);"
        "print(len(r.incidents), hwm)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    n, rss_kib = out.stdout.split()
    assert n == "1"
    assert int(rss_kib) < 150 * 1024, f"peak RSS {int(rss_kib) // 1024} MiB"


# -- file faults ----------------------------------------------------------------------------


def test_fifo_device_symlink_loop_and_deleted_file(tmp_path):
    d = tmp_path / "f"
    d.mkdir()
    (d / "good-rank0.log").write_text(ENOSPC + "\n")
    os.mkfifo(d / "pipe.log")
    (d / "loop").symlink_to(d)  # directory loop
    (d / "a.log").symlink_to(d / "b.log")
    (d / "b.log").symlink_to(d / "a.log")  # file symlink loop
    t0 = time.perf_counter()
    r = scan_paths([str(d), "/dev/null", str(d / "pipe.log")], include_user=False)
    assert time.perf_counter() - t0 < 20  # a FIFO never blocks the scan
    assert r.incidents and r.incidents[0].initiating.signature == "os.enospc"
    assert any("not a regular file" in w for w in r.warnings)

    from denpex_tui.core.history import read_history
    from denpex_tui.core.matcher import Matcher
    from denpex_tui.core.sources import discover

    (d / "gone-rank1.log").write_text(ENOSPC + "\n")
    src = [s for s in discover([str(d)]).sources if "gone" in s.path][0]
    os.unlink(src.path)  # deleted between listing and reading
    got = []
    read_history([src], Matcher(r.catalog), got.append)
    errors = got[0].processor.errors
    assert errors and "no such file" in errors[0]


def test_directory_with_100000_files(tmp_path):
    d = tmp_path / "many"
    d.mkdir()
    for i in range(100_000):
        (d / f"f{i}.dat").touch()
    (d / "rank0.log").write_text(ENOSPC + "\n")
    t0 = time.perf_counter()
    r = scan_paths([str(d)], include_user=False)
    assert time.perf_counter() - t0 < 30
    assert len(r.job.results) == 1 and r.incidents


def _run_as_nobody(fn):
    """Run ``fn`` in a forked child that dropped root for 'nobody' (no exec: the interpreter
    need not be readable by that user). Returns what ``fn`` returned (JSON-able)."""
    import pwd

    pw = pwd.getpwnam("nobody")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            out = {"ok": fn()}
        except BaseException as exc:  # report, never raise in the child
            out = {"error": repr(exc)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def test_permission_denied_as_a_non_root_user(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("runs as root and drops to 'nobody'; as a normal user permissions apply as they are")
    d = tmp_path / "perm"
    d.mkdir()
    (d / "rank0.log").write_text(ENOSPC + "\n")
    secret = d / "rank1.log"
    secret.write_text(ENOSPC + "\n")
    secret.chmod(0)
    locked = d / "locked"
    locked.mkdir()
    (locked / "rank2.log").write_text(ENOSPC + "\n")
    locked.chmod(0)
    p = d
    while True:  # let 'nobody' traverse down to the test folder
        os.chmod(p, os.stat(p).st_mode | 0o005)
        if p == p.parent or str(p) in ("/tmp", "/"):
            break
        p = p.parent

    def job():
        r = scan_paths([str(d)], include_user=False)
        return {"warnings": r.warnings, "rank": r.incidents[0].initiating.rank if r.incidents else None}

    out = _run_as_nobody(job)
    assert "ok" in out, out
    ws = " | ".join(out["ok"]["warnings"])
    assert "rank1.log: permission denied" in ws
    assert "locked: permission denied" in ws
    assert out["ok"]["rank"] == 0


# -- read-only and local --------------------------------------------------------------------

AUDIT = r"""
import socket, sys, runpy
BAD = {socket.AF_INET, socket.AF_INET6}
def hook(event, args):
    if event == "socket.__new__" and args[1] in BAD:
        raise SystemExit("denpex opened a network socket: %r" % (args,))
    if event in ("socket.connect", "socket.bind", "socket.sendto") and getattr(args[0], "family", None) in BAD:
        raise SystemExit("denpex used a network socket: %r" % (args,))
sys.addaudithook(hook)
sys.argv = ["denpex"] + sys.argv[1:]
runpy.run_module("denpex_tui", run_name="__main__")
"""


def _snapshot(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p)] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
    out[str(root)] = os.stat(root).st_mtime_ns
    return out


def test_never_writes_to_the_logs_and_never_opens_a_network_socket(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(CORPUS / "enospc_checkpoint_fastfail", job)
    before = _snapshot(job)
    hook = tmp_path / "audit.py"
    hook.write_text(AUDIT)
    tb = (job / "console.log").read_bytes()
    for args, stdin in (
        (["scan", str(job)], None),
        (["scan", "--json", str(job)], None),
        (["explain", "-"], tb),
        (["signatures"], None),
        (["probe", "--json", "--path", str(job), "--logs", str(job)], None),
    ):
        r = subprocess.run([sys.executable, str(hook), *args], capture_output=True, input=stdin, timeout=120)
        assert r.returncode in (0, 1), (args, r.stderr.decode())
        assert b"network socket" not in r.stderr
    p = subprocess.Popen([sys.executable, str(hook), "scan", "--follow", "--json", str(job)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(3)
    p.terminate()
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err.decode()
    assert b'"incident"' in out
    assert _snapshot(job) == before


# -- faulty filesystems (FUSE) ----------------------------------------------------------------


@pytest.fixture
def faulty_mount(tmp_path):
    from fusemount import fuse_mount

    with fuse_mount("fusefs.py", tmp_path) as mnt:
        yield mnt


def test_eio_and_hung_files_cost_only_their_own_source(faulty_mount, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "rank3.log").write_text(ENOSPC + "\n")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "scan", "--json", "--io-timeout", "2",
                        str(faulty_mount), str(faulty_mount / "hungdir"), str(other)],
                       capture_output=True, text=True, timeout=90)
    assert time.perf_counter() - t0 < 60
    assert r.returncode == 1, r.stderr
    assert "eio-rank1.log: read error (Input/output error)" in r.stderr
    assert "hang-rank2.log: a read did not answer in 2 s (hung filesystem?)" in r.stderr
    assert "hungdir: no answer for 2 s" in r.stderr or "hungdir: no progress" in r.stderr
    doc = json.loads(r.stdout)
    ranks = {f["rank"] for f in doc["findings"] if f["signature"] == "os.enospc"}
    assert {0, 3} <= ranks
