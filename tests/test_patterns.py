"""The pattern engine: RE2 subset, linear time on crafted lines, a literal for the prefilter."""

import time

import pytest

from denpex_tui.core.patterns import PatternError, Prefilter, compile_pattern, required_literal


def test_required_literal():
    assert required_literal(r"\[Errno 28\] No space left on device")[0] == "[Errno 28] No space left on device"
    assert required_literal(r"(?i)too many open files")[1] is True


@pytest.mark.parametrize(
    "pattern",
    [r"(a)\1 xxxx", r"(?=abcd)abcd", r"(?<!x)abcd", r"(?(1)a|b)abcd", r"x*", r"[a-z]+\d+"],
)
def test_refused_patterns(pattern):
    with pytest.raises(PatternError):
        compile_pattern(pattern)


def test_redos_pattern_runs_in_linear_time():
    # The classic catastrophic-backtracking shape; stdlib re takes exponential time on it.
    p = compile_pattern(r"Errno (a+)+b")
    line = "Errno " + "a" * 50_000 + "!"
    t0 = time.perf_counter()
    assert p.search(line) is None
    assert time.perf_counter() - t0 < 0.5


def test_prefilter_finds_candidate_lines_only():
    pf = Prefilter([("No space left on device", False), ("too many open files", True)])
    data = b"ok\nOSError: [Errno 28] No space left on device: 'x'\nfine\nOSError: [Errno 24] Too Many Open Files\nend\n"
    starts = pf.line_starts(data)
    lines = [data[s : data.index(b"\n", s)] for s in starts]
    assert lines == [b"OSError: [Errno 28] No space left on device: 'x'", b"OSError: [Errno 24] Too Many Open Files"]


def test_both_prefilter_backends_find_the_same_lines(monkeypatch):
    from denpex_tui.core import patterns

    lits = [("No space left on device", False), ("too many open files", True), ("Traceback (most recent", False)]
    data = (b"x\n" * 1000 + b"OSError: [Errno 28] No space left on device\n" + b"y\n" * 1000
            + b"[rank1]: Traceback (most recent call last):\nTOO MANY OPEN FILES\n") * 3
    got = {}
    for backend in ("hyperscan", "re2"):
        if backend == "hyperscan" and not patterns.HAVE_HYPERSCAN:
            continue
        monkeypatch.setenv("DENPEX_PREFILTER", backend)
        pf = Prefilter(lits)
        assert pf.backend == backend
        got[backend] = pf.line_starts(data)
    assert len(got["re2"]) == 9
    assert len({tuple(v) for v in got.values()}) == 1


def test_every_built_in_pattern_compiles():
    """The built-in catalog's patterns are compiled at their first search (most never see a line
    with their literal): each must compile, as a user pack's are checked as they load."""
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.core.patterns import _engine

    cat = load_catalog(include_user=False)
    assert not cat.problems
    pats = [p for s in cat for p in (*s.patterns, *s.excludes)]
    assert len(pats) > 200
    for p in pats:
        _engine(p.source)  # raises PatternError if RE2 refuses it
        assert p.search("") is None  # and its search compiles on first use


def test_a_direct_search_finds_what_the_binding_finds():
    """Every built-in signature's pattern and exclusion, searched without the RE2 binding's
    Python layer, matches the lines the binding matches, with the same groups, on every
    catalog example, every kept log's lines (the corpus's, the wild logs') and the reference's
    quoted messages where they are at hand (non-ASCII and multi-byte text included)."""
    from pathlib import Path

    import re2

    from denpex_tui.core import patterns
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.core.lines.facts import parse_line

    cat = load_catalog(include_user=False)
    fixtures = Path(__file__).resolve().parent / "fixtures"
    reference = Path(__file__).resolve().parents[2] / "shared" / "reference" / "failure-messages.md"
    lines = [e.line for s in cat for e in s.examples]
    if reference.exists():  # (beside the repo where it was made; not in a clean clone)
        lines += reference.read_text(errors="replace").splitlines()
    lines += ["écriture échouée: No space left on device ☃ [Errno 28] 空间不足", "OSError: [Errno 28] ñ"]
    for p in sorted(fixtures.rglob("*.log")):  # (the corpus's runs among them)
        got = p.read_text(errors="replace").splitlines()
        lines += got[:: max(1, len(got) // 1000)]
    texts = sorted({parse_line(ln[:4096]).text for ln in lines})
    assert len(texts) > 3000
    hits = 0
    for source in sorted({p.source for s in cat for p in (*s.patterns, *s.excludes)}):
        opts = re2.Options()
        opts.max_mem = 8 << 20
        rx = re2.compile(source, options=opts)
        direct = patterns._direct_search(rx)
        assert direct is not None, source
        for t in texts:
            want, got = rx.search(t), direct(t)
            assert (want is None) == (got is None), (source, t)
            if want is not None:
                hits += 1
                assert got.group(0) == want.group(0) and got.groupdict() == want.groupdict(), (source, t)
    assert hits > 500


def test_a_signature_that_has_searched_crosses_to_another_process():
    """A history worker's findings carry their signatures back by pickle: a signature whose
    patterns have run (compiled, with their direct search) pickles, and searches the same after."""
    import pickle

    from denpex_tui.core.catalog import load_catalog

    cat = load_catalog(include_user=False)
    sig = cat.get("torch.save-write-failed") or next(iter(cat))
    line = next(e.line for e in sig.examples if e.match)
    from denpex_tui.core.lines.facts import parse_line

    text = parse_line(line).text
    want = sig.search(text)
    assert want is not None
    back = pickle.loads(pickle.dumps(sig))
    assert back.search(text) == want
    user = compile_pattern(r"No space left on device: '(?P<path>[^']+)'")  # a pack's: compiled at once
    assert pickle.loads(pickle.dumps(user)).search("OSError: [Errno 28] No space left on device: '/ckpt/x.pt'") \
        .groupdict() == {"path": "/ckpt/x.pt"}
