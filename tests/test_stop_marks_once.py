"""A stream's stop mark is its last progress line among the last WINDOW bytes of its file, so a
history chunk followed by a window's worth of bytes makes no mark that lasts: the history pass
skips it. Its marks are those of the same bytes fed in small chunks, each marked; and a file
that is shorter than it was when it was found (cut while read) still gets its last chunk's."""

from __future__ import annotations

import dataclasses

from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.history import read_history
from denpex_tui.core.lines.facts import PROGRESS_NEEDLES
from denpex_tui.core.lines.reader import read_chunks
from denpex_tui.core.matcher import Matcher
from denpex_tui.core.pipeline import SourceProcessor
from denpex_tui.core.sources import discover
from helpers import CORPUS

# real consoles with progress lines on every rank
_LOGS = [CORPUS / "clean_run" / "console.log", CORPUS / "stalled_rank_hang" / "console.log"]


def _marks(p: SourceProcessor) -> dict:
    return {k: (m.offset, m.line, m.step, m.text) for k, m in p.stop_marks.items()}


def _history(info, m) -> SourceProcessor:
    got = []
    read_history([info], m, got.append, jobs=1, io_timeout=None)
    return got[0].processor


def test_the_history_passs_marks_are_those_of_every_chunk_marked(tmp_path):
    m = Matcher(load_catalog(include_user=False))
    # two history chunks: the first followed by more than a window; then by less, of lines with
    # no progress (its last MiB's marks are the file's)
    quiet = b"".join(ln for ln in (CORPUS / "fd_leak_emfile" / "console.log").read_bytes().splitlines(True)
                     if not any(n in ln for n in PROGRESS_NEEDLES))
    for log, size, tail in zip(_LOGS, (10_500_000, 8_000_000), (b"", quiet * (700_000 // len(quiet) + 1))):
        body = log.read_bytes()
        big = tmp_path / f"{log.parent.name}.log"
        big.write_bytes(body * (size // len(body) + 1) + tail)
        info = discover([str(big)]).sources[0]
        ref = SourceProcessor(info, m)
        for off, data in read_chunks(str(big), chunk=1 << 20):
            ref.feed(data, off)
        ref.close()
        want = _marks(ref)
        assert len(want) >= 2, log
        assert _marks(_history(info, m)) == want, log


def test_a_file_cut_short_while_read_keeps_its_last_chunks_marks(tmp_path):
    m = Matcher(load_catalog(include_user=False))
    body = (CORPUS / "clean_run" / "console.log").read_bytes()
    big = tmp_path / "console.log"
    big.write_bytes(body * (9_000_000 // len(body) + 1))
    info = discover([str(big)]).sources[0]
    whole = _marks(_history(info, m))
    assert len(whole) >= 2
    # found at 12 MB, 9 MB when read: its last chunk was fed as if more bytes followed it
    assert _marks(_history(dataclasses.replace(info, size=12_000_000), m)) == whole


def test_a_failure_summarys_bare_labels_are_no_streams_and_marks_are_unchanged(monkeypatch):
    # torchrun's summary opens each entry with a bare "[1]:" line (every failed torchrun
    # console ends with one): counted as streams, they kept the walk going to MAX_HITS
    from denpex_tui.core import stopmarks
    from denpex_tui.core.lines.heads import stream_labels

    m = Matcher(load_catalog(include_user=False))
    tail = (CORPUS / "enospc_checkpoint_fastfail" / "console.log").read_bytes()
    labels = stream_labels(tail)
    assert {b"[0]:", b"[1]:"} <= set(labels)
    assert stopmarks._speaking(tail, 0, labels) == sum(1 for lab in labels if lab.startswith(b"[default"))
    consoles = [s for d in sorted(CORPUS.iterdir()) if d.is_dir() for s in discover([str(d)]).sources
                if s.kind == "console"]
    assert len(consoles) >= 6

    def marks(info):
        p = SourceProcessor(info, m)
        for off, data in read_chunks(info.path):
            p.feed(data, off)
        return _marks(p)

    fast = [marks(s) for s in consoles]
    monkeypatch.setattr(stopmarks, "_speaking", lambda data, lo, labels: len(labels))  # every label
    assert fast == [marks(s) for s in consoles]
    assert sum(map(len, fast)) >= 10


def test_a_utf16_files_marks_are_its_texts(tmp_path):
    # its offsets are the decoded text's: the file's size says nothing of what follows a chunk
    m = Matcher(load_catalog(include_user=False))
    body = (CORPUS / "clean_run" / "console.log").read_bytes()
    quiet = b"".join(ln for ln in (CORPUS / "fd_leak_emfile" / "console.log").read_bytes().splitlines(True)
                     if not any(n in ln for n in PROGRESS_NEEDLES))
    text = body * (8_000_000 // len(body) + 1) + quiet * (700_000 // len(quiet) + 1)
    (tmp_path / "u8").mkdir()
    (tmp_path / "u16").mkdir()
    (tmp_path / "u8" / "console.log").write_bytes(text)
    (tmp_path / "u16" / "console.log").write_bytes(text.decode().encode("utf-16"))
    want = _marks(_history(discover([str(tmp_path / "u8")]).sources[0], m))
    assert len(want) >= 2
    got = _history(discover([str(tmp_path / "u16")]).sources[0], m)
    assert got.bytes_read >= len(text) - 2 and not got.errors
    assert {k: v[1:] for k, v in _marks(got).items()} == {k: v[1:] for k, v in want.items()}
