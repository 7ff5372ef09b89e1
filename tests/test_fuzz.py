"""Property-based tests (hypothesis) over the line pipeline, the prefix/timestamp parsers and
the catalog loader: arbitrary input never raises, never loses the line count, never produces
unsafe text. Bounded in time for CI; bench/fuzz.py runs the same targets coverage-guided."""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from denpex_tui.core.catalog import _build, _Invalid
from denpex_tui.core.model import SourceInfo
from denpex_tui.core.pipeline import SourceProcessor
from helpers import CORPUS

REAL_LINES = [
    l
    for p in sorted(CORPUS.rglob("*.log"))
    for l in p.read_bytes().splitlines()[:400]
    if l.strip()
][:3000]

line = st.one_of(
    st.sampled_from(REAL_LINES),
    st.binary(max_size=200),
    st.builds(lambda a, b: a + b, st.sampled_from(REAL_LINES), st.binary(max_size=40)),
    st.just(b"Traceback (most recent call last):"),
    st.just(b"During handling of the above exception, another exception occurred:"),
    st.just(b"Failures:"),
    st.just(b"Root Cause (first observed failure):"),
    st.just(b"============================================================"),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(line, max_size=120), st.sampled_from(["console", "rank-file", "error-json"]), st.integers(1, 7))
def test_pipeline_never_raises_and_counts_every_line(matcher, lines, kind, splits):
    data = b"".join(l.replace(b"\n", b" ") + b"\n" for l in lines)
    p = SourceProcessor(SourceInfo(path="/fuzz.log", kind=kind, local_rank=1), matcher)
    if kind == "error-json":
        p.feed_error_json(data)
        return
    # Fed in arbitrary whole-line pieces: the same result as one piece.
    cuts = sorted({data.find(b"\n", i * len(data) // splits) + 1 for i in range(1, splits)} - {0})
    pos = 0
    for c in cuts + [len(data)]:
        if c > pos:
            p.feed(data[pos:c], pos)
            pos = c
    p.close()
    assert p.line_no == len(lines)
    for f in p.findings.values():
        assert 1 <= f.line <= max(1, len(lines)) and f.text_line >= f.line
        assert all(ch == "\t" or ch >= " " for ch in f.text)


FIELDS = ["schema", "id", "title", "family", "phase", "role", "severity", "patterns", "cause", "symptoms", "fix",
          "references", "examples", "verify", "checklist", "refines", "exclude", "affects", "unknown"]
value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(string.printable, max_size=30)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["text", "condition", "title",
                            "command", "line", "match", "source", "id", "evidence", "package", "versions"]), inner,
                                                                            max_size=4)),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS), value, max_size=14))
def test_catalog_loader_only_ever_reports_a_field(doc):
    from pathlib import Path

    try:
        _build(doc, Path("x.toml"), "fuzz", builtin=False)
    except _Invalid as exc:
        assert exc.field is not None and "\n" not in exc.message
