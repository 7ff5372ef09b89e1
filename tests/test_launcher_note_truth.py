"""The sentence under the headline that answers torchrun's Root Cause says only what the logs show
(seen in a tmux pass over the corpus): no 'first failure' where the ranks failed of the same cause
at the same time, and no exact time for an error whose traceback carries none."""

from __future__ import annotations

import os

from denpex_tui.core.scan import scan_paths
from denpex_tui.core.story import job_story

CORPUS = os.path.join(os.path.dirname(__file__), "fixtures", "corpus")


def _story(case):
    r = scan_paths([os.path.join(CORPUS, case)])
    return r, job_story(r.incidents, r.job.failure_entries(), len(r.job.ranks_by_attempt()))


def test_same_cause_ranks_are_not_told_as_a_first_failure():
    # /dev/shm full: both ranks fail within the same second; which was first is not decidable
    r, st = _story("shm_enospc_dataloader")
    assert st.root.same_cause and st.root.same_cause[0].rank == 1
    note = st.launcher_note
    assert note.startswith("torchrun's Root Cause names rank 1;")
    assert "first failure" not in note, note
    assert "same cause" in note and "cannot be decided" in note, note
    ev = " ".join(st.root.evidence)
    assert "its own log shows the first initiating failure" not in ev, ev


def test_an_untimed_traceback_is_not_given_an_exact_time():
    # rank 3's traceback (stderr, no timestamps) follows its 17:43:57.953 line in console.log, but
    # its save of step 90 began at 17:43:58.206: the error is only known to be after .953
    r, st = _story("fd_leak_emfile")
    init = st.root.initiating
    assert init.rank == 3
    note = st.launcher_note
    if init.time_approx:
        assert "own error at 17:43:57.953" not in note, note
        assert "after 17:43:57.953" in note, note
