"""Coverage-guided fuzzing (atheris) of the pipeline, the line parsers and the catalog loader.

    pip install atheris
    python bench/fuzz.py pipeline -atheris_runs=200000     # or: lines, catalog, text
    python bench/fuzz.py pipeline -max_total_time=300

Each target asserts the same invariants as tests/test_fuzz.py (no exception, every line
counted, safe text only); a crash is a bug. Reports, it is not part of the test run.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import atheris  # noqa: E402

with atheris.instrument_imports():
    from denpex_tui.core import text
    from denpex_tui.core.lines import facts, times
    from denpex_tui.core.catalog import _build, _Invalid, load_catalog
    from denpex_tui.core.matcher import Matcher
    from denpex_tui.core.model import SourceInfo
    from denpex_tui.core.pipeline import SourceProcessor

try:
    import tomllib
except ImportError:  # pragma: no cover
    import tomli as tomllib  # type: ignore

MATCHER = Matcher(load_catalog(include_user=False))


def fuzz_pipeline(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    kind = fdp.PickValueInList(["console", "rank-file", "error-json"])
    body = fdp.ConsumeBytes(fdp.remaining_bytes())
    p = SourceProcessor(SourceInfo(path="/fuzz.log", kind=kind, local_rank=0), MATCHER)
    if kind == "error-json":
        p.feed_error_json(body)
        return
    if not body.endswith(b"\n"):
        body += b"\n"
    p.feed(body, 0)
    p.close()
    assert p.line_no == body.count(b"\n")
    for f in p.findings.values():
        assert all(ch == "\t" or ch >= " " for ch in f.text)


def fuzz_lines(data: bytes) -> None:
    s = data.decode("utf-8", "replace")
    p = facts.parse_line(s)
    assert p.text in s
    times.line_time(s, 2026)
    facts.parse_level(s)


def fuzz_text(data: bytes) -> None:
    t = text.safe_line(data)
    assert not any(ord(c) < 32 and c != "\t" or 0x7F <= ord(c) <= 0x9F for c in t.text)


def fuzz_catalog(data: bytes) -> None:
    try:
        doc = tomllib.loads(data.decode("utf-8", "replace"))
    except Exception:
        return
    try:
        _build(doc, Path("x.toml"), "fuzz", builtin=False)
    except _Invalid:
        pass


TARGETS = {"pipeline": fuzz_pipeline, "lines": fuzz_lines, "text": fuzz_text, "catalog": fuzz_catalog}

if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in TARGETS else "pipeline"
    argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a != name]
    atheris.Setup(argv, TARGETS[name])
    atheris.Fuzz()
