"""Victim or cause (issue 21, mechanism 6), on real logs: the ranks that time out waiting in a
collective while another rank is slow inside a checkpoint save are victims; the saving rank is the
cause. When the collective started (a timeout report's time minus how long it ran) puts it at the
save's announcement even when the saving rank's line names no rank. And when every rank timed out
and none failed before, no victim is called 'stalled'."""

import os
from pathlib import Path

from denpex_tui.core.scan import scan_paths

RUNS = Path(__file__).parent / "fixtures" / "runs"
WILD = Path(__file__).parent / "fixtures" / "wild"


def _root(d: Path):
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs if f != "truth.json")
    r = scan_paths(files, include_user=False)
    return next(i for i in r.incidents if i.initiating is not None)


def test_a_save_under_way_when_the_collective_started_is_the_cause():
    # Beaker log: "Saving latest checkpoint" (no rank), rank 7's watchdog 1200027 ms later
    inc = _root(WILD / "d_ace_checkpoint_save_then_rank7_watchdog")
    init = inc.initiating
    assert init.signature == "dist.rank-stalled" and init.phase == "checkpoint-save"
    assert init.rank is None and init.line == 1 and inc.confidence == "low"
    assert [c.rank for c in inc.collateral] == [7]
    assert any("within a second of a checkpoint save" in e for e in inc.evidence)
    assert any("victims" in e and "SIGABRT" in e for e in inc.evidence)
    assert any(h["rank"] == 7 and "victim" in h["rule"] for h in inc.hypotheses)


def test_the_rank_stalled_inside_its_save_is_the_cause_its_peers_victims():
    # rank 2's torch.save stalls 60 s; ranks 0, 1, 3 time out in the barrier after 15 s
    inc = _root(RUNS / "fr_checkpoint_stall" / "logs")
    assert inc.initiating.rank == 2 and inc.initiating.signature == "dist.rank-stalled"
    assert inc.initiating.phase == "checkpoint-save"
    assert "stalled in a checkpoint save" in inc.summary
    assert sorted(c.rank for c in inc.collateral) == [0, 1, 3]
    assert any("rank 2 was inside a checkpoint save" in e and "victims" in e for e in inc.evidence)


def test_every_rank_timed_out_no_victim_is_called_stalled():
    # ranks 2 and 3 time out in the consolidation barrier; the ranks still consolidating print nothing
    inc = _root(WILD / "d_automodel_consolidation_barrier_ranks2_3")
    assert inc.initiating.signature == "nccl.watchdog-timeout" and inc.initiating.rank == 2
    assert inc.confidence == "low" and [c.rank for c in inc.collateral] == [3]
    assert "no rank failed before it" in inc.summary
    assert any("victim of the wait" in e for e in inc.evidence)


def test_a_stall_outside_a_save_gets_no_save_phase():
    inc = _root(RUNS / "hf_trainer_stalled_rank")  # rank 1 blocks on a FIFO, not in a save
    assert inc.initiating.rank == 1 and inc.initiating.phase != "checkpoint-save"


def test_a_save_the_stalled_rank_finished_is_not_where_it_stalled():
    # corpus stalled_rank_hang: rank 3's last line is 'Saved checkpoint shard for step 80 ... in
    # 0.00s' (its save finished); it blocks later, at step 88, in a read (truth.json). The headline
    # said 'stalled in a checkpoint save' and the evidence 'rank 3 was inside a checkpoint save'.
    inc = _root(Path(__file__).parent / "fixtures" / "corpus" / "stalled_rank_hang")
    assert inc.initiating.rank == 3 and inc.initiating.signature == "dist.rank-stalled"
    assert "Saved checkpoint shard for step 80" in inc.initiating.text
    assert inc.initiating.phase != "checkpoint-save"
    assert "stalled in a checkpoint save" not in inc.summary, inc.summary
    assert not any("was inside a checkpoint save" in e for e in inc.evidence), inc.evidence
