"""The shape of a failure across ranks (issue 21, mechanism 7), on real logs: every rank's
fingerprint report together names the odd rank; a Slurm cancellation with nothing failed before is
the scheduler's stop, no rank's; a wrapper that names the failed worker gives a rankless death its
rank; a Ray worker that vanished is a killed process; the same error from several unlabelled
processes is said to be alike."""

import os
from pathlib import Path

from denpex_tui.core.scan import scan_paths
from denpex_tui.core.shape import fingerprints

RUNS = Path(__file__).parent / "fixtures" / "runs"
WILD = Path(__file__).parent / "fixtures" / "wild"


def _root(d: Path):
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs if f != "truth.json")
    r = scan_paths(files, include_user=False)
    return next(i for i in r.incidents if i.initiating is not None)


def test_every_ranks_fingerprint_report_names_the_odd_rank():
    lines = [ln for ln in (RUNS / "collective_mismatch" / "console.log").read_text().splitlines()
             if "Detected mismatch between collectives" in ln]
    fps = fingerprints(lines)
    assert fps[3][2] == "128,64" and {fps[r][2] for r in (0, 1, 2)} == {"256,64"}
    for d in (RUNS / "collective_mismatch", RUNS / "collective_mismatch" / "logs"):
        inc = _root(d)
        assert inc.initiating.rank == 3 and inc.initiating.signature == "dist.collective-mismatch"
        assert sorted(c.rank for c in inc.collateral) == [0, 1, 2]
        assert any("rank 3 differs from the majority" in e for e in inc.evidence)


def test_a_scheduler_cancel_with_nothing_failed_before_is_no_ranks():
    for case in ("c_myria3d_slurm_step_cancelled_glued_progress", "d_submitit_slurm_requeue_preempted"):
        inc = _root(WILD / case)
        assert inc.initiating.signature == "slurm.job-cancelled-limit"
        assert inc.initiating.rank is None
        assert any("stopped from outside" in e for e in inc.evidence)
        assert not any("appears" in e for e in inc.evidence)
    inc = _root(RUNS / "srun_time_limit")
    assert inc.initiating.rank is None and sorted(c.rank for c in inc.collateral) == [0, 1, 2, 3]


def test_a_wrapper_naming_the_failed_worker_gives_a_rankless_death_its_rank():
    inc = _root(WILD / "c_ray_train_worker0_killed_oom")  # raylet: a worker died; TorchTrainer: Worker 0 has failed
    assert inc.initiating.signature == "proc.killed" and inc.initiating.rank == 0
    assert any("Worker 0 has failed" in e and "taken as that rank's" in e for e in inc.evidence)


def test_an_actor_died_error_is_the_death_it_wraps():
    inc = _root(WILD / "c_simplerl_ray_actor_died_oom")  # the driver re-raises ActorDiedError
    assert inc.initiating.signature == "proc.killed"
    assert inc.initiating.fields.get("reported_by") == "ray"


def test_the_same_error_from_unlabelled_processes_is_alike():
    inc = _root(WILD / "d_mdetr_interleaved_invalid_device_ordinal")
    assert inc.initiating.signature == "cuda.error"
    assert any("3 times" in e and "alike" in e for e in inc.evidence)
