"""One door for text, proved on every output at once.

A property test: hypothesis draws hostile file names, folder (node) names, a signature-pack
folder name and hostile text inside real failure lines (terminal escape sequences, C1
controls, bidi and zero-width marks, Rich/Textual markup, bytes that are not UTF-8, an SGR
with a 4 400-digit parameter), writes a multi-node job with them, and runs every output on
it: ``scan`` (human and ``--json``), ``scan --follow --json``, ``probe`` (human and ``--json``),
``explain``, ``checkpoints``, ``signatures --check`` and ``watch`` in a pseudo-terminal (discovering the job
from a training process whose ``--log-dir`` is hostile, with a user pack, a copied command and
a deleted file). Every byte written is checked: valid UTF-8, no control or format character,
and on the terminal no escape sequence but the app's own (CSI, its pointer-shape OSC 22, the
OSC 52 of the command it copied).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
import unicodedata
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from helpers import readable

# Real lines (failure-messages.md C1, and the torchrun/logging layout of the corpus) with the
# hostile text spliced in where a log author controls it.
ENOSPC = "OSError: [Errno 28] No space left on device: '{d}/global_step100/mp_rank_00_model_states.pt'"
INFO = "2026-11-29 17:40:16,343 INFO [rank{r}/4] train: step 60 loss 2.31 {t}"

UNDECODABLE = "\udcff\udc9b"  # the bytes 0xff 0x9b in a name (os.fsdecode's surrogateescape)
NAME_FRAGMENTS = [
    "\x1b]52;c;cm0gLXJmIH4vKgo=\x07",  # OSC 52: write the clipboard
    "\x1b]0;PWNED\x07",  # OSC 0: window title
    "\x1b[2J", "\x1b[21t", "\x1b[201~",  # clear, report title, bracketed-paste end
    "\u009b6n", "\u009d0;T\u009c",  # 8-bit CSI and OSC
    "\u202e", "\u2067", "\u200b", "\u200f", "\u2028", "\u061c", "\ufeff",  # bidi, zero-width, separators
    "\x07", "\x08", "\r", "\n", "\x7f",
    "[x=a:b]", "[link=https:evil]l", "[bold]", "[", "]",  # markup: MarkupError or a link
    UNDECODABLE,
]
LINE_FRAGMENTS = NAME_FRAGMENTS + ["\x1b[" + "1" * 4400 + "m", "[/link]", "[/]"]
# raw sequences that only the data could have written (Textual never emits these)
PLANTED = [b"\x1b[2J", b"\x1b[21t", b"\x1b[201~", b"\x1b]0;", b"\x1b]52;c;cm0g", b"\xc2\x9b", b"\xc2\x9d"]


def _name(frags: list[str], plain: str) -> str:
    return plain + "".join(frags)


names = st.builds(_name, st.lists(st.sampled_from(NAME_FRAGMENTS), min_size=1, max_size=3),
                  st.text(alphabet="abcxyz-_. ", min_size=0, max_size=4))
texts = st.lists(st.sampled_from(LINE_FRAGMENTS), min_size=1, max_size=4).map("".join)

WORST = {
    "folder": "\x1b]0;PWNED\x07[x=a:b]\u202e" + UNDECODABLE,
    "node": "\x1b]52;c;cm0gLXJmIH4vKgo=\x07[link=https:evil]l\u200b",
    "file": "\x1b[21t[bold]\u061c\u2028" + UNDECODABLE,
    "pack": "\x1b]0;PWNED\x07[x=a:b]",
    "text": "\x1b[" + "1" * 4400 + "m\x1b]0;PWNED\x07[/link][x=a:b]\u009b6n\u200f",
}


# -- checks ---------------------------------------------------------------------------------


def _unsafe_chars(text: str) -> list[str]:
    """Control, format, separator and surrogate characters (other than line breaks and TAB)."""
    return sorted({repr(c) for c in text if c not in "\n\t" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs")})


def check_plain(out: bytes, where: str) -> str:
    text = out.decode("utf-8")  # strict: every output is valid UTF-8, whatever the names held
    assert "Traceback" not in text, (where, text[-2000:])
    assert _unsafe_chars(text) == [], (where, _unsafe_chars(text))
    return text


def _strings(doc):
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield k
            yield from _strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v)


def check_json_doc(doc, where: str) -> None:
    bad = [s for s in _strings(doc) if _unsafe_chars(s)]
    assert bad == [], (where, bad[:3])


_APP_SEQ = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\]22;[^\x07\x1b]*\x07|\x1b\]52;c;(?P<b64>[A-Za-z0-9+/=]*)\x07")


def check_terminal(out: bytes, copied: list[str]) -> str:
    """Raw pty bytes: only the app's own escape sequences, and no planted one."""
    for seq in PLANTED:
        assert seq not in out, seq
    for m in _APP_SEQ.finditer(out):
        if m.group("b64") is not None:
            copied.append(base64.b64decode(m.group("b64")).decode())
    rest = _APP_SEQ.sub(b"", out).decode("utf-8")
    assert "\x1b" not in rest and "\x07" not in rest, rest[rest.find("\x1b") - 80:][:200]
    assert _unsafe_chars(rest.replace("\r", "")) == [], _unsafe_chars(rest)
    return rest


# -- the job ----------------------------------------------------------------------------------


def _write_job(root: Path, folder: str, node: str, file: str, pack: str, text: str) -> dict:
    # hostile text first: a narrow column (the node column shows 3 characters) still starts with it
    job = root / (folder.replace("/", "_") + "-job")
    nodes = [node.replace("/", "_") + "-node", "b-node"]
    for i, n in enumerate(nodes):
        base = job / n / "logs" / "run_x" / "attempt_0"
        for lr in range(2):
            (base / str(lr)).mkdir(parents=True, exist_ok=True)
        r0, r1 = 2 * i, 2 * i + 1
        if i == 0:  # the rank that fails first: ENOSPC on a path holding hostile text
            (base / "0" / "stderr.log").write_bytes(
                (f"[rank{r0}]: Traceback (most recent call last):\n"
                 f'[rank{r0}]:   File "/app/train{text}.py", line 1, in <module>\n'
                 f"[rank{r0}]: " + ENOSPC.format(d=f"/ckpt/{text}") + "\n").encode("utf-8", "surrogateescape"))
        else:
            (base / "0" / "stdout.log").write_bytes((INFO.format(r=r0, t=text) + "\n").encode("utf-8", "surrogateescape"))
        (base / "1" / "stdout.log").write_bytes((INFO.format(r=r1, t=text) + "\n").encode("utf-8", "surrogateescape"))
    fname = file.replace("/", "_")[:120] + "-rank7.log"
    named = job / fname
    named.write_bytes(("[rank7]: " + ENOSPC.format(d=f"/ckpt/{text}") + "\n").encode("utf-8", "surrogateescape"))
    gone = job / (file.replace("/", "_")[:120] + "-gone.log")
    gone.write_bytes((INFO.format(r=7, t="x") + "\n").encode())
    (job / (file.replace("/", "_")[:100] + "-bin.log")).write_bytes(b"\x00\x01\x02\xff" * 4096)
    # a user pack: its folder name is hostile, its command title holds markup (which a pack may)
    packdir = root / (pack.replace("/", "_") + "-pack")
    packdir.mkdir()
    (packdir / "team.ckpt-enospc.toml").write_text(PACK)
    (packdir / ("team.bad" + pack.replace("/", "_")[:60] + ".toml")).write_bytes(b"schema = 1\n")
    # a DeepSpeed checkpoint folder: a hostile file name in a tag, hostile text in 'latest'
    ckpt = root / (folder.replace("/", "_") + "-ckpt")
    for step in (1, 2):
        tag = ckpt / f"global_step{step}"
        tag.mkdir(parents=True)
        (tag / "mp_rank_00_model_states.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 60)
        (tag / (file.replace("/", "_")[:100] + "-zero_pp_rank_0_mp_rank_00_optim_states.pt")).write_bytes(b"x")
    (ckpt / "latest").write_bytes(("global_step2" + text).encode("utf-8", "surrogateescape"))
    return {"job": job, "named": named, "gone": gone, "pack": packdir, "ckpt": ckpt}


PACK = """schema = 1
id = "team.ckpt-enospc"
title = "Checkpoint disk full [x=a:b] [link=https://evil.example]here[/link]"
family = "team"
phase = "checkpoint-save"
role = "initiating"
severity = "error"
exception = true
refines = ["os.enospc"]
patterns = ['No space left on device: \\S*/global_step\\d+/']
cause = "The checkpoint disk is full [bold]"
symptoms = ["[x=a:b] save fails"]
fix = ["Free space [/]"]
references = ["failure-messages.md C1"]

[[verify]]
title = "free space [x=a:b] [link=https://evil.example]x[/link]"
command = "df -h -- {dir}"

[[examples]]
line = "OSError: [Errno 28] No space left on device: '/ckpt/global_step100/mp_rank_00_model_states.pt'"
match = true
source = "failure-messages.md C1"

[[examples]]
line = "[rank0]: step 60 loss 2.31"
match = false
source = "corpus/enospc_checkpoint_fastfail"
"""


def _run(*args, stdin=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "denpex_tui", *map(str, args)], capture_output=True, input=stdin,
                          timeout=timeout)


def _follow_json(job: Path, pack: Path) -> bytes:
    p = subprocess.Popen([sys.executable, "-m", "denpex_tui", "scan", "--follow", "--json", "--signatures", str(pack),
                          str(job)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = b""
    end = time.monotonic() + 60
    os.set_blocking(p.stdout.fileno(), False)
    while time.monotonic() < end and b'"event": "incident"' not in out:
        readable(p.stdout, 0.2)
        out += p.stdout.read() or b""
    p.send_signal(signal.SIGINT)
    rest, err = p.communicate(timeout=20)
    assert b'"event": "incident"' in out, (out[-500:], err[-500:])
    check_plain(err, "follow stderr")
    return out + (rest or b"")


# -- watch in a pseudo-terminal ---------------------------------------------------------------

TRAINER = "import sys, time; time.sleep(float(sys.argv[1]))"
LAUNCH = r"""
import os, subprocess, sys
job = os.fsdecode(bytes.fromhex(sys.argv[1]))
trainer = subprocess.Popen([sys.executable, "-c", sys.argv[2], "120", "--log-dir", job],
                           env=dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="4"))
try:
    sys.exit(subprocess.call([sys.executable, "-m", "denpex_tui", "watch", *sys.argv[3:]]))
finally:
    trainer.kill()
"""


def _namespaced() -> list[str]:
    """Run in a private PID namespace when the machine allows it, so the only training process
    watch discovers is ours."""
    if not shutil.which("unshare"):
        return []
    for pre in (["unshare", "--pid", "--fork", "--mount-proc"],
                ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]):
        if subprocess.run([*pre, "true"], capture_output=True).returncode == 0:
            return pre
    return []


def _read(fd: int, seconds: float, want: tuple[bytes, ...] = ()) -> bytes:
    """What the app writes for ``seconds``, or until every ``want`` was seen (and a frame more)."""
    out = b""
    end = time.monotonic() + seconds
    waiting = bool(want)
    while time.monotonic() < end:
        r = [fd] if readable(fd, 0.1) else []
        if fd in r:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            if waiting and all(w in _APP_SEQ.sub(b"", out) for w in want):
                end = min(end, time.monotonic() + 1.5)
                waiting = False
    return out


def _watch(files: dict) -> tuple[int, bytes]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="200", LINES="50")
    env.pop("NO_COLOR", None)
    cmd = [*_namespaced(), sys.executable, "-c", LAUNCH, os.fsencode(str(files["job"])).hex(), TRAINER,
           "--signatures", str(files["pack"])]
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
                            start_new_session=True)
    os.close(slave)
    try:
        # the job is in: the rank that failed first is named
        out = _read(master, 60, want=(b"FAILED FIRST",))
        os.unlink(files["gone"])  # the "file deleted" toast names it
        out += _read(master, 15, want=(b"deleted",))
        for key in (b"4", b"\t", b"c"):  # the fix pane, its first command, copy it
            os.write(master, key)
            out += _read(master, 2)
        os.write(master, b"q")
        out += _read(master, 8)
        proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
    return proc.returncode, out


# -- the property ---------------------------------------------------------------------------


@settings(max_examples=int(os.environ.get("DENPEX_HOSTILE_EXAMPLES", "2")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@example(**WORST)
@given(folder=names, node=names, file=names, pack=names, text=texts)
def test_hostile_names_and_lines_reach_no_output_raw(tmp_path_factory, folder, node, file, pack, text):
    root = tmp_path_factory.mktemp("hostile")
    files = _write_job(root, folder, node, file, pack, text)
    job = files["job"]

    r = _run("scan", "--no-measure", job)  # human report
    assert r.returncode == 1, r.stderr
    human = check_plain(r.stdout, "scan")
    check_plain(r.stderr, "scan stderr")
    assert "rank 0" in human and "binary file" in check_plain(r.stderr, "scan stderr")

    r = _run("scan", "--json", "--no-measure", job)
    assert r.returncode == 1, r.stderr
    doc = json.loads(check_plain(r.stdout, "scan --json"))
    check_json_doc(doc, "scan --json")
    assert doc["incidents"] and any("-rank7.log" in s["path"] for s in doc["sources"])

    for line in check_plain(_follow_json(job, files["pack"]), "follow --json").splitlines():
        check_json_doc(json.loads(line), "follow --json")

    r = _run("probe", "--json", "--logs", job)
    assert r.returncode == 0, r.stderr
    check_json_doc(json.loads(check_plain(r.stdout, "probe --json")), "probe --json")
    r = _run("probe", "--logs", job)
    assert r.returncode == 0, r.stderr
    check_plain(r.stdout + r.stderr, "probe")

    for args in (["explain", files["named"]], ["explain", "--json", files["named"]],
                 ["explain", "-"]):
        r = _run(*args, stdin=files["named"].read_bytes() if args[-1] == "-" else None)
        assert r.returncode in (0, 1), r.stderr
        check_plain(r.stdout + r.stderr, " ".join(map(str, args[:2])))

    for args in (["checkpoints", files["ckpt"]], ["checkpoints", "--json", files["ckpt"]]):
        r = _run(*args)
        assert r.returncode in (0, 1, 2), r.stderr
        out = check_plain(r.stdout, " ".join(map(str, args[:2])))
        check_plain(r.stderr, "checkpoints stderr")
        if "--json" in args and r.stdout:
            check_json_doc(json.loads(out), "checkpoints --json")

    r = _run("signatures", "--check", files["pack"])
    assert r.returncode == 2  # the bad file is a problem, named (escaped) on stderr
    assert "team.bad" in check_plain(r.stderr, "signatures --check")
    check_plain(r.stdout, "signatures --check stdout")
    r = _run("scan", "--signatures", files["pack"], "--no-measure", job)
    assert "user pack" in check_plain(r.stdout, "scan with pack")

    rc, out = _watch(files)
    copied: list[str] = []
    shown = check_terminal(out, copied)
    assert rc == 0, shown[-3000:]
    for seen in ("FAILED FIRST", "user pack", "deleted", "following"):
        assert seen in shown, f"watch never showed {seen!r}"
    assert copied and all("\x1b" not in c and not _unsafe_chars(c) for c in copied), copied
