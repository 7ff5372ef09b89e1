"""FileFollower driven by hand: deterministic rotation/truncation/rewrite cases.

Each test calls ``poll()`` directly (no threads, no timing), so "between two polls"
is exactly what the test does between two calls.
"""

from __future__ import annotations

import os
import shutil

import pytest

from denpex_tui.live import sources
from denpex_tui.live.dirwatch import classify_name
from denpex_tui.live.follower import FileFollower
from denpex_tui.live.sources import MAX_LINE, Chunk, SourceEvent


class Run:
    def __init__(self, path, **kw):
        self.f = FileFollower(str(path), **kw)
        self.t = 1000.0
        self.items: list = []

    def poll(self, dt: float = 0.05, budget: int = sources.READ_CHUNK, until_idle: bool = True):
        out = []
        for _ in range(1000):
            self.t += dt
            r = self.f.poll(self.t, budget)
            out.extend(r.items)
            if not (r.more and until_idle):
                break
        self.items.extend(out)
        return out

    def data(self, items=None) -> bytes:
        return b"".join(i.data for i in (self.items if items is None else items) if isinstance(i, Chunk))

    def events(self, items=None):
        return [(i.state, i.detail) for i in (self.items if items is None else items) if isinstance(i, SourceEvent)]

    def states(self, items=None):
        return [s for s, _ in self.events(items)]


def lines(n0, n1, tag="L"):
    return b"".join(f"{tag} {i:06d} some log text\n".encode() for i in range(n0, n1))


def test_history_then_live_and_partial_lines(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(lines(0, 3) + b"partial")
    r = Run(p)
    out = r.poll()
    assert r.states(out) == ["added"]
    chunks = [c for c in out if isinstance(c, Chunk)]
    assert chunks and all(c.history for c in chunks)
    assert r.data(out) == lines(0, 3)
    with open(p, "ab") as fh:
        fh.write(b" line\n")
    out = r.poll()
    assert r.data(out) == b"partial line\n"
    c = [c for c in out if isinstance(c, Chunk)][0]
    assert c.offset == len(lines(0, 3)) and not c.history and not c.partial_end


def test_offsets_are_file_offsets(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"")
    r = Run(p)
    r.poll()
    off = 0
    for i in range(5):
        chunk = lines(i * 3, i * 3 + 3)
        with open(p, "ab") as fh:
            fh.write(chunk)
        out = r.poll()
        c = [c for c in out if isinstance(c, Chunk)][0]
        assert c.offset == off and c.data == chunk
        off += len(chunk)


def test_from_end_skips_history_and_partial_line(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(lines(0, 10) + b"half of a li")
    r = Run(p, start="end")
    assert r.data(r.poll()) == b""
    with open(p, "ab") as fh:
        fh.write(b"ne\n" + lines(10, 12))
    assert r.data(r.poll()) == lines(10, 12)


def test_rename_rotation_drains_old_file_and_late_writes(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(lines(0, 5))
    r = Run(p)
    r.poll()
    fh = open(p, "ab", buffering=0)
    fh.write(lines(5, 8))
    os.rename(p, str(p) + ".1")
    fh.write(lines(8, 10))  # writer has not reopened yet
    p.write_bytes(lines(100, 103))
    out = r.poll(dt=1.5)  # reads the growth of the old file
    out += r.poll(dt=1.5)  # quiet: the name is checked, the new file found
    assert "rotated" in r.states(out)
    fh.write(lines(10, 11) + b"tail without newline")  # late write after we switched
    fh.close()
    r.poll(dt=1.0)
    r.poll(dt=sources.LINGER_S + 1)  # old file retired: partial flushed
    data = r.data()
    assert data.count(b"\n") == 5 + 3 + 2 + 1 + 3 + 1
    for i in list(range(0, 11)) + list(range(100, 103)):
        assert data.count(f"L {i:06d} ".encode()) == 1
    flushed = [c for c in r.items if isinstance(c, Chunk) and c.partial_end]
    assert flushed and flushed[-1].data == b"tail without newline\n"


def test_copytruncate_recovers_tail_from_dot1(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(lines(0, 50))
    r = Run(p)
    r.poll()
    with open(p, "ab") as fh:
        fh.write(lines(50, 60))  # appended after our last poll
    shutil.copyfile(p, str(p) + ".1")
    os.truncate(p, 0)
    with open(p, "ab") as fh:
        fh.write(lines(60, 62))  # smaller than our offset: size < offset
    out = r.poll()
    assert r.states(out) == ["truncated"]
    assert "a.log.1" in r.events(out)[0][1]
    assert r.data() == lines(0, 62)
    recovered = [c for c in out if isinstance(c, Chunk) and "recovered" in c.note]
    assert recovered and recovered[0].data == lines(50, 60)


def test_plain_truncation_reads_new_content(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(lines(0, 50))
    r = Run(p)
    r.poll()
    os.truncate(p, 0)
    with open(p, "ab") as fh:
        fh.write(lines(200, 202))
    out = r.poll()
    assert r.states(out) == ["truncated"]
    assert r.data(out) == lines(200, 202)


def test_truncate_and_regrow_past_offset_is_possibly_lost(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(lines(0, 5))
    r = Run(p)
    r.poll()
    # between two polls: truncate, and the new content grows past our offset
    p.write_bytes(lines(0, 20, tag="N"))
    out = r.poll()
    assert r.states(out) == ["possibly-lost"]
    assert r.data(out) == lines(0, 20, tag="N")


def test_truncate_and_regrow_with_copy_is_recovered(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(lines(0, 5))
    r = Run(p)
    r.poll()
    with open(p, "ab") as fh:
        fh.write(lines(5, 8))
    shutil.copyfile(p, str(p) + ".1")
    p.write_bytes(lines(0, 30, tag="N"))
    out = r.poll()
    assert r.states(out) == ["truncated"]
    assert r.data(out) == lines(5, 8) + lines(0, 30, tag="N")


def test_truncate_regrow_same_size_detected_by_mtime(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(lines(0, 5))
    r = Run(p)
    r.poll()
    st = os.stat(p)
    p.write_bytes(lines(0, 5, tag="N"))  # same size, new content
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    out = r.poll()
    assert r.states(out) == ["possibly-lost"]
    assert r.data(out) == lines(0, 5, tag="N")


def test_rewrite_in_place_with_same_head_does_not_repeat_unchanged_prefix(tmp_path):
    p = tmp_path / "a.log"
    head = lines(0, 100)  # > 1 KiB of identical prefix
    p.write_bytes(head)
    r = Run(p)
    r.poll()
    with open(p, "ab") as fh:
        fh.write(lines(100, 110))
    r.poll()
    # rewritten in place: same first 100 lines, then different content
    p.write_bytes(head + lines(100, 105) + lines(0, 40, tag="X"))
    out = r.poll()
    # indistinguishable from a truncation to line 105 and a regrowth: lines appended after
    # our last read may be lost, and the event says so; the unchanged lines are not repeated
    assert r.states(out) == ["possibly-lost"]
    assert r.data(out) == lines(0, 40, tag="X")


def test_atomic_replace_with_same_content_continues(tmp_path):
    p = tmp_path / "error.json"
    p.write_bytes(lines(0, 60))
    r = Run(p)
    r.poll()
    tmp = tmp_path / "error.json.tmp"
    tmp.write_bytes(lines(0, 60) + lines(60, 62))
    os.replace(tmp, p)
    out = r.poll(dt=1.5)
    assert "replaced" in r.states(out)
    assert r.data(out) == lines(60, 62)


def test_deleted_is_an_event_and_then_recreated(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(lines(0, 2))
    r = Run(p)
    r.poll()
    os.unlink(p)
    out = r.poll(dt=1.5)
    assert r.states(out) == ["deleted"]
    r.poll(dt=sources.LINGER_S + 1)
    p.write_bytes(lines(10, 12))
    out = r.poll(dt=1.0)
    assert r.states(out) == ["added"] and "recreated" in r.events(out)[0][1]
    assert r.data(out) == lines(10, 12)


def test_missing_explicit_path_waits_then_added(tmp_path):
    p = tmp_path / "later.log"
    r = Run(p)
    out = r.poll()
    assert r.states(out) == ["error"] and "waiting" in r.events(out)[0][1]
    assert r.poll() == []
    p.write_bytes(lines(0, 1))
    out = r.poll()
    assert r.states(out) == ["added"] and r.data(out) == lines(0, 1)


def test_fifo_is_an_error_not_a_hang(tmp_path):
    p = tmp_path / "pipe.log"
    os.mkfifo(p)
    r = Run(p)
    out = r.poll()
    assert r.states(out) == ["error"] and "FIFO" in r.events(out)[0][1]


def test_permission_denied_is_an_error(tmp_path, monkeypatch):
    p = tmp_path / "secret.log"
    p.write_bytes(b"x\n")
    real = sources.os_open

    def deny(path, flags, *a):
        if str(path) == str(p):
            raise PermissionError(13, "Permission denied")
        return real(path, flags, *a)

    monkeypatch.setattr(sources, "os_open", deny)
    r = Run(p)
    out = r.poll()
    assert r.states(out) == ["error"] and "permission" in r.events(out)[0][1]
    assert r.poll() == []  # reported once
    monkeypatch.setattr(sources, "os_open", real)
    out = r.poll()
    assert r.states(out) == ["added"]


def test_long_line_is_split_in_pieces_of_at_most_1mib(tmp_path):
    p = tmp_path / "a.log"
    big = b"x" * (3 * MAX_LINE + 123)
    p.write_bytes(b"start\n")
    r = Run(p)
    r.poll()
    with open(p, "ab") as fh:
        for i in range(0, len(big), 200_000):
            fh.write(big[i : i + 200_000])
            r.poll()
        fh.write(b"\nafter\n")
    r.poll()
    chunks = [c for c in r.items if isinstance(c, Chunk)]
    pieces = [c for c in chunks if c.partial_end or c.continues]
    assert all(len(c.data) <= MAX_LINE + 1 for c in pieces)
    assert sum(c.data.count(b"x") for c in chunks) == len(big)
    assert pieces[0].partial_end and not pieces[0].continues
    assert pieces[-1].continues and not pieces[-1].partial_end
    assert r.data().endswith(b"after\n")


def test_long_line_written_at_once_is_split(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"a\n" + b"y" * (2 * MAX_LINE + 5) + b"\nb\n")
    r = Run(p)
    r.poll()
    chunks = [c for c in r.items if isinstance(c, Chunk)]
    assert max(len(c.data) for c in chunks if b"y" in c.data) <= MAX_LINE + 1
    assert r.data().replace(b"\n", b"") == b"a" + b"y" * (2 * MAX_LINE + 5) + b"b"


def test_partial_line_flushed_after_quiet_timeout(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"")
    r = Run(p)
    r.poll()
    with open(p, "ab") as fh:
        fh.write(b"RuntimeError: CUDA error: an illegal memory acc")  # writer died mid-line
    r.poll()
    out = r.poll(dt=sources.PARTIAL_TIMEOUT_S + 0.1)
    c = [c for c in out if isinstance(c, Chunk)]
    assert c and c[0].partial_end and c[0].data.endswith(b"acc\n")


def test_nul_bytes_are_held_back_briefly(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"")
    r = Run(p)
    r.poll()
    with open(p, "r+b") as fh:  # an NFS hole: the size grew before the data arrived
        fh.write(b"ok line\n")
        fh.seek(8 + 20)
        fh.write(b"\n")
    out = r.poll(dt=0.05)
    assert r.data(out) == b"ok line\n"
    with open(p, "r+b") as fh:
        fh.seek(8)
        fh.write(b"filled in later 1234")
    out = r.poll(dt=0.05)
    assert r.data(out) == b"filled in later 1234\n"


def test_history_only_rotated_file_is_read_once(tmp_path):
    p = tmp_path / "train.log.1"
    p.write_bytes(lines(0, 3) + b"end")
    r = Run(p, history_only=True, explicit=False)
    r.poll()
    assert r.f.state == "done"
    assert r.data() == lines(0, 3) + b"end\n"
    assert all(c.history for c in r.items if isinstance(c, Chunk))


def test_gz_history(tmp_path):
    import gzip

    p = tmp_path / "train.log.2.gz"
    with gzip.open(p, "wb") as fh:
        fh.write(lines(0, 1000))
    r = Run(p, history_only=True, explicit=False)
    r.poll()
    assert r.data() == lines(0, 1000)


def test_classify_name():
    assert classify_name("stdout.log") == "live"
    assert classify_name("1234-7.out") == "live"
    assert classify_name("error.json") == "live"
    assert classify_name("train.err") == "live"
    assert classify_name("notes.txt") == "live"
    assert classify_name("train.log.1") == "rotated"
    assert classify_name("train.log.3.gz") == "rotated"
    assert classify_name("train.log.gz") == "rotated"
    assert classify_name("train.log-20240101") == "rotated"
    assert classify_name("model.pt") is None
    assert classify_name("events.out.tfevents.1700000000.host.123.0") is None
    assert classify_name(".hidden.log") is None


@pytest.mark.parametrize("budget", [100, 4096])
def test_small_budget_reads_everything_in_order(tmp_path, budget):
    p = tmp_path / "a.log"
    p.write_bytes(lines(0, 300))
    r = Run(p)
    r.poll(budget=budget)
    assert r.data() == lines(0, 300)


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.binary(min_size=0, max_size=300).map(lambda b: b.replace(b"\x00", b".")), min_size=1, max_size=25),
       budgets=st.lists(st.integers(min_value=1, max_value=500), min_size=1, max_size=5))
def test_any_write_pattern_reassembles_exactly(tmp_path_factory, pieces, budgets):
    """Whatever the write boundaries and read budgets, the emitted bytes are the file's
    bytes: whole lines only, each exactly once, offsets consistent."""
    p = tmp_path_factory.mktemp("h") / "a.log"
    p.write_bytes(b"")
    r = Run(p)
    r.poll()
    written = b""
    for i, piece in enumerate(pieces):
        with open(p, "ab") as fh:
            fh.write(piece)
        written += piece
        r.poll(budget=budgets[i % len(budgets)])
    with open(p, "ab") as fh:
        fh.write(b"\n")
    written += b"\n"
    r.poll()
    chunks = [c for c in r.items if isinstance(c, Chunk)]
    assert all(c.data.endswith(b"\n") for c in chunks)
    assert b"".join(c.data for c in chunks) == written
    for c in chunks:
        assert written[c.offset : c.offset + len(c.data)] == c.data
