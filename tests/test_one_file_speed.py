"""The same bytes as one file are read like the folder (issue 18): a console whose ranks' last
words were tracebacks, followed in the same file by a long run of other lines (here the ranks' own
logs, concatenated after it as `cat console.log logs/*/*.log > all.log` makes them).

A traceback stays open while its stream may still add lines to it, and while one is open every
line is read one by one. A rank whose traceback was its last word in the console left it open for
the rest of the file: the 179 MB long job as one file took 12 s against 1.7 s for its folder. A
traceback whose stream has said nothing for ``QUIET_LINES`` lines is closed; the diagnosis is the
same either way."""

from __future__ import annotations

import re
from pathlib import Path

from denpex_tui.core import pipeline
from denpex_tui.core.scan import scan_paths
from denpex_tui.core.tracebacks import QUIET_LINES

CASE = Path(__file__).parent / "fixtures" / "corpus" / "enospc_checkpoint_fastfail"
STEP = re.compile(rb" train: step \d+/")


def test_a_console_traceback_left_open_does_not_make_the_rest_of_the_file_slow(tmp_path, monkeypatch):
    logs = sorted(p for p in (CASE / "logs").rglob("*.log"))
    steps = b"".join(x for p in logs for x in p.read_bytes().splitlines(keepends=True) if STEP.search(x))
    one = tmp_path / "all.log"
    body = (CASE / "console.log").read_bytes()
    one.write_bytes(body + steps * (3 * QUIET_LINES // steps.count(b"\n") + 1))
    slow_lines = []
    orig = pipeline.SourceProcessor._line

    def _line(self, data, s, e, lineno, off, candidate):
        if not candidate:
            slow_lines.append(lineno)  # read one by one although no detector wants it
        return orig(self, data, s, e, lineno, off, candidate)

    monkeypatch.setattr(pipeline.SourceProcessor, "_line", _line)
    r = scan_paths([str(one)], include_user=False, jobs=1)
    ref = scan_paths([str(CASE / "console.log")], include_user=False, jobs=1)
    got = r.incidents[0].initiating
    want = ref.incidents[0].initiating
    assert (got.signature, got.rank, got.line) == (want.signature, want.rank, want.line)
    console_lines = body.count(b"\n")
    # past the console no line goes the slow way: while the ranks' tracebacks are open, only
    # their own streams' lines can add to them, and none follows (core/streamjump.py)
    assert [n for n in slow_lines if n > console_lines] == []
