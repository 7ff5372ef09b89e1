"""A save line's kind is decided without running the rules on lines that cannot match them
(progress.save_kind); the answer must be the rules' own on every line."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from denpex_tui.core.progress import _NOT_DONE, SAVE_DONE, SAVE_START, save_kind

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REFERENCE = Path(__file__).resolve().parent.parent.parent / "shared" / "reference" / "failure-messages.md"


def _rules(text: str) -> tuple[bool, bool]:
    is_start = SAVE_START.search(text) is not None
    return is_start, not is_start and SAVE_DONE.search(text) is not None and not _NOT_DONE.search(text)


def test_the_rules_answer_on_every_real_line():
    paths = sorted(FIXTURES.rglob("*.log")) + ([REFERENCE] if REFERENCE.exists() else [])
    kinds = {(False, False): 0, (True, False): 0, (False, True): 0}
    for p in paths:
        for line in p.read_text("utf-8", "replace").splitlines():
            got = save_kind(line)
            assert got == _rules(line), line
            kinds[got] += 1
    assert kinds[(True, False)] > 20 and kinds[(False, True)] > 20, kinds


PIECES = ["Saving checkpoint", "saving CHECKPOINT", "Saved checkpoint", "checkpoint", " saved", "saved", "is ready now!",
          "Copying complete!", "successfully saved checkpoint", "saving model to '", ".ckpt'", "'", "not", "failed",
          "error", " ", "x", "_", "step 10", "\u017fave", "\u212a", "\u00e9", "is about to be saved", "Saving current state to"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=8))
def test_the_rules_answer_on_any_mix(parts):
    text = "".join(parts)
    assert save_kind(text) == _rules(text)
