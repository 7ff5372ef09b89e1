"""The first-warning search finds its candidate lines in C over the whole tail it reads; they
must be the lines a line-by-line test gives (with their indices: line numbers come from them)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from denpex_tui.core.firstwarn import _MAYBE_WARNING, _maybe_warnings

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _by_line(blob: bytes, skip_first: bool) -> list[tuple[int, bytes]]:
    return [(i, raw) for i, raw in enumerate(blob.split(b"\n"))
            if not (i == 0 and skip_first) and _MAYBE_WARNING.search(raw, 0, 400)]


def test_the_same_lines_as_line_by_line_on_every_fixture_log():
    found = 0
    for p in sorted(FIXTURES.rglob("*.log")):
        blob = p.read_bytes()[-(2 << 20):]
        for skip in (False, True):
            want = _by_line(blob, skip)
            assert list(_maybe_warnings(blob, skip_first=skip)) == want, p
            found += len(want)
    assert found > 50


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"WARN", b"W1129 17:40:", b"W12", b"x" * 97, b"\n", b" ", b"A", b"N", b"7"]),
                max_size=60), st.booleans())
@example([b"x" * 97] * 4 + [b"x" * 10, b"WARN"], False)  # a warning word ending past the 400th byte
@example([b"x" * 97] * 4 + [b"x" * 8, b"WARN"], False)  # ... and one ending at it
@example([b"x" * 97] * 4 + [b"WARN", b"\n", b"WARN"], True)
def test_the_same_lines_as_line_by_line_on_any_bytes(parts, skip):
    blob = b"".join(parts)
    assert list(_maybe_warnings(blob, skip_first=skip)) == _by_line(blob, skip)
