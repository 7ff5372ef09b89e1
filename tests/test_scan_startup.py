"""A small job costs no Hyperscan compile (issue 18, scan start-up < 0.3 s).

Compiling the catalog's literals for Hyperscan costs about 35 ms of CPU, each time a matcher is
made; its faster scan pays that back only over tens of MB. A scan of a few MB (and the first-warning
search, which matches lines one by one and never uses the prefilter) uses RE2, which finds the same
lines (tests/test_patterns.py): the diagnosis is the same with either."""

from __future__ import annotations

import pytest

from denpex_tui.core import patterns
from denpex_tui.core.scan import scan_paths
from tests.helpers import CORPUS

CASE = CORPUS / "enospc_checkpoint_fastfail"


def _compiles(monkeypatch) -> list[int]:
    made: list[int] = []
    real = patterns._hs.Database

    class Counting(real):  # type: ignore[misc, valid-type]
        def compile(self, *a, **kw):
            made.append(1)
            return super().compile(*a, **kw)

    monkeypatch.setattr(patterns._hs, "Database", Counting)
    return made


@pytest.mark.skipif(not patterns.HAVE_HYPERSCAN, reason="Hyperscan is not installed here")
def test_a_small_job_is_scanned_without_compiling_hyperscan(monkeypatch):
    monkeypatch.delenv("DENPEX_PREFILTER", raising=False)
    made = _compiles(monkeypatch)
    r = scan_paths([str(CASE)], include_user=False, jobs=1)
    assert r.incidents and r.incidents[0].initiating.rank == 2
    assert r.backend == "re2"
    assert made == []  # neither the scan's matcher nor the first-warning search compiled one


@pytest.mark.skipif(not patterns.HAVE_HYPERSCAN, reason="Hyperscan is not installed here")
def test_the_small_job_diagnosis_is_the_same_with_hyperscan(monkeypatch):
    monkeypatch.delenv("DENPEX_PREFILTER", raising=False)
    small = scan_paths([str(CASE)], include_user=False, jobs=1)
    monkeypatch.setattr(patterns, "HYPERSCAN_WORTH", 0)
    monkeypatch.setattr("denpex_tui.core.scan.HYPERSCAN_WORTH", 0)
    big = scan_paths([str(CASE)], include_user=False, jobs=1)
    assert big.backend == "hyperscan"
    assert small.to_json() == big.to_json()
