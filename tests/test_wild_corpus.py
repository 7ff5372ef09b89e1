"""Denpex on logs it was not built with: real logs users pasted into public issue threads
(tests/fixtures/wild/) and our own fault-injected runs (tests/fixtures/runs/), each scored
against the thread's (or the run's) own conclusion in truth.json. `bench/accuracy.py` prints
the same score by family and by prefix format."""

import json

import pytest

from scoring import cases, log_files, score_case

WILD = cases("wild")
RUNS = cases("runs")

# The bar of issue 9: 90 % on signature, and on rank where the truth has one.
SIGNATURE_BAR = 0.90
RANK_BAR = 0.90


def _score(cs):
    scores = [score_case(c) for c in cs]
    sig = sum(s.sig_ok for s in scores) / len(scores)
    ranked = [s for s in scores if s.rank_ok is not None]
    rank = sum(bool(s.rank_ok) for s in ranked) / len(ranked) if ranked else 1.0
    wrong = [f"{s.name}: {s.got_sig} rank {s.got_rank} (truth {s.accept[:2]} rank {s.truth_rank})"
             for s in scores if not s.sig_ok or s.rank_ok is False]
    return sig, rank, wrong


def test_the_wild_corpus_is_big_and_varied():
    assert len(WILD) >= 60
    fams = {json.loads((c / "truth.json").read_text())["family"] for c in WILD}
    fmts = {f for c in WILD for f in json.loads((c / "truth.json").read_text())["formats"]}
    assert len(fams) >= 12, fams
    assert len(fmts) >= 8, fmts


@pytest.mark.parametrize("case", WILD + RUNS, ids=lambda c: c.name)
def test_truth_points_at_a_real_line(case):
    t = json.loads((case / "truth.json").read_text())
    fe = t["first_error"]
    if not t["accept"]:  # a healthy control run: nothing may be initiating
        assert fe is None and t.get("initiating_rank") is None, case
        return
    lines = (case / fe["file"]).read_text(errors="replace").splitlines()
    assert lines[fe["line"] - 1].strip() == fe["text"].strip()


def test_wild_corpus_score():
    sig, rank, wrong = _score(WILD)
    assert sig >= SIGNATURE_BAR and rank >= RANK_BAR, (
        f"signature {sig:.0%}, rank {rank:.0%}; wrong:\n" + "\n".join(wrong))


@pytest.mark.skipif(not RUNS, reason="no runs")
def test_own_runs_score():
    sig, rank, wrong = _score(RUNS)
    assert sig >= SIGNATURE_BAR and rank >= RANK_BAR, "\n".join(wrong)
    scores = [score_case(c) for c in RUNS]
    coll = [s for s in scores if s.collateral_ok is not None]
    assert sum(s.collateral_ok for s in coll) >= 0.9 * len(coll), [s.name for s in coll if not s.collateral_ok]


@pytest.mark.parametrize("case", WILD[:1], ids=lambda c: c.name)
def test_log_files_exclude_truth(case):
    assert all(not p.endswith("truth.json") for p in log_files(case))
