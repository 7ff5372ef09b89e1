"""What a console's lines open with (core/lines/heads.py): the shortcut over distinct line
openings gives every line the head and the chunk the labels that the two rules give when run
over the whole chunk, on every fixture log (the wild logs and the corpus runs among them), in
chunks of several sizes; lines the shortcut cannot decide are matched one by one, and a chunk
of mostly such lines is left to the rules' pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from denpex_tui.core.lines import heads
from denpex_tui.core.lines.heads import _HEAD, _LABELS, _LABEL_NUM, line_heads, openings, stream_labels
from denpex_tui.core.lines.rows import line_starts
from helpers import line_chunks

FIX = Path(__file__).parent / "fixtures"


def _logs():
    for p in sorted(FIX.rglob("*")):
        if p.is_file() and p.name != "truth.json" and p.suffix in (".log", ".txt", ".out", ".err"):
            data = p.read_bytes()
            if data and b"\0" not in data[:4096]:
                yield p, data if data.endswith(b"\n") else data + b"\n"


def _rules(data: bytes) -> tuple[list[bytes], dict[bytes, int]]:
    """The two rules run over the whole chunk, as before the shortcut."""
    n = data.count(b"\n")
    labels = {}
    for lab in set(_LABELS.findall(b"\n" + data)):
        m = _LABEL_NUM.search(lab)
        if m:
            labels[lab] = int(m.group(0))
    return _HEAD.findall(b"\n" + data)[:n], labels


@pytest.fixture
def always(monkeypatch):
    """The shortcut on every chunk, whatever its size and however many lines it leaves."""
    monkeypatch.setattr(heads, "_MIN_BYTES", 0)
    monkeypatch.setattr(heads, "_OTHERS", 0)


@pytest.mark.parametrize("size", [600, 4096, 1 << 20])
def test_heads_and_labels_are_the_rules_on_every_fixture_log(always, size):
    n = shortcut_lines = 0
    for p, data in _logs():
        for chunk in line_chunks(data, size):
            starts = line_starts(chunk)
            codes, distinct = line_heads(chunk, starts)
            want_heads, want_labels = _rules(chunk)
            assert [distinct[c] for c in codes.tolist()] == want_heads, p
            assert stream_labels(chunk) == want_labels, p
            for since in (1, len(chunk) // 2, len(chunk) - 1):  # the labels of the lines from there on
                first = chunk.find(b"\n", since - 1) + 1
                assert stream_labels(chunk, since=since) == _rules(chunk[first:])[1], (p, since)
            o = openings(chunk)
            shortcut_lines += len(starts) - len(o.others)
            n += len(starts)
    assert n > 10_000
    assert shortcut_lines > 1_000  # the torchrun consoles' lines were decided by the shortcut


def test_a_torchrun_consoles_labelled_and_plain_lines_are_decided_by_their_openings():
    """A real torchrun --tee console: every line that opens with its label and then its text
    ('[default1]:2026-...'), or with a word and no label ('Traceback (most recent call last):'),
    is decided by the shortcut; only lines that open with a space, a second label
    ('[default1]:[rank1]: ...') or a word and ':' are left to the rules."""
    import re

    data = (FIX / "corpus" / "fd_leak_emfile" / "console.log").read_bytes()
    o = openings(data)
    lines = data.splitlines()
    left = set(o.others.tolist())
    for i, line in enumerate(lines):
        decided = re.match(rb"\[default\d\]:[^\s\[]|[A-Za-z0-9][\w.-]*[^\w.:-]", line + b"\n") is not None
        assert (i in left) != decided, line
    assert len(left) < len(lines)
    assert stream_labels(data) == _rules(data)[1]
    assert set(stream_labels(data).values()) == {0, 1, 2, 3}


def test_lines_the_shortcut_cannot_decide_are_matched_one_by_one(always):
    """A label alone on its line, a label followed by a space and a second label, a label
    followed by a tab, srun's task label, mpirun's and a pod's, between torchrun lines."""
    base = (FIX / "corpus" / "fd_leak_emfile" / "console.log").read_bytes().splitlines(keepends=True)[:200]
    odd = [b"[default0]:\n", b"[default1]: [rank1]: RuntimeError: oops\n", b"[default2]:\tx\n",
           b"  3: [rank3]:[E1129 17:40:18.662] Watchdog caught collective operation timeout\n",
           b"[1,2]<stderr>:Traceback (most recent call last):\n",
           b"[pod/trainer-0/main] [default0]:2026-11-29 17:40:10 INFO step 1\n"]
    data = b"".join(base[:50] + odd + base[50:])
    starts = line_starts(data)
    codes, distinct = line_heads(data, starts)
    want_heads, want_labels = _rules(data)
    assert [distinct[c] for c in codes.tolist()] == want_heads
    assert stream_labels(data) == want_labels
    assert len(openings(data).others) >= len(odd)


def test_a_chunk_of_undecided_lines_is_left_to_the_rules(monkeypatch):
    """More than an eighth of the lines left over: the rules' pass, not a Python loop."""
    monkeypatch.setattr(heads, "_MIN_BYTES", 0)
    data = (FIX / "corpus" / "deepspeed_enospc_checkpoint").rglob("*.log").__next__().read_bytes()
    if not data.endswith(b"\n"):
        data += b"\n"
    assert not openings(data).worth
    calls = []
    monkeypatch.setattr(heads, "_HEAD_AT", type("Spy", (), {"match": lambda *a: calls.append(a)})())
    starts = line_starts(data)
    codes, distinct = line_heads(data, starts)
    assert [distinct[c] for c in codes.tolist()] == _rules(data)[0]
    assert not calls


def test_the_view_and_the_pipeline_share_a_chunks_line_starts():
    """The history pass asks for a console chunk's labels (pipeline) and then its heads (the
    view's index): the line starts and rows are made once per chunk."""
    from denpex_tui.core.lines.chunk import chunk_lines

    data = (FIX / "corpus" / "fd_leak_emfile" / "console.log").read_bytes() * 20
    stream_labels(data)
    kept = openings(data)
    cl = chunk_lines(0, data, console=True, times=False)
    assert cl.starts is kept.starts
    assert openings(data) is kept


@pytest.mark.parametrize("size", [600, 1 << 20])
def test_the_ranks_a_chunks_in_text_tags_name_are_the_regex_passs(size):
    """text_ranks from the chunk's in-text marks (numpy, once per distinct tag) names the ranks
    a TEXT_RANK pass over the chunk names, on every fixture log."""
    import re

    from denpex_tui.core.lines import chunk
    from denpex_tui.core.lines.formats import TEXT_RANK

    rx = re.compile(TEXT_RANK.pattern.encode())
    named = 0
    for _p, data in _logs():
        for part in line_chunks(data * (1 + (1 << 16) // len(data)), size):  # both ways: under and over 64 KB
            want = set()
            for n, s in set(rx.findall(part)):
                n = n or s
                if n and not n.startswith(b"-") and len(n) <= 7:
                    want.add(int(n))
            assert chunk.text_ranks(part) == want
            named += bool(want)
    assert named > 20
