"""Say what and where (issue 21, mechanism 8): the frames around an error give its phase and its
place, on real logs. An EMFILE in a DataLoader worker is data loading, not a checkpoint save; an
ENOSPC from a POSIX semaphore is /dev/shm; a bus error inside NCCL is its /dev/shm segments; an
NCCL 'unhandled system error' with a socket WARN is not /dev/shm."""

import os
from pathlib import Path

import pytest

from denpex_tui.core.scan import scan_paths
from denpex_tui.core.where import PLACES, where_hits

RUNS = Path(__file__).parent / "fixtures" / "runs"
WILD = Path(__file__).parent / "fixtures" / "wild"


def _root(case: Path):
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(case) for f in fs if f != "truth.json")
    r = scan_paths(files, include_user=False)
    return next(i for i in r.incidents if i.initiating is not None)


@pytest.mark.parametrize("entry", PLACES, ids=lambda p: p.name)
def test_every_place_entry_matches_its_real_examples(entry):
    for ex in entry.examples:
        assert entry.name in where_hits(ex), ex


@pytest.mark.parametrize("case", [
    WILD / "d_face_recognition_interleaved_emfile_dupfd",  # interleaved tracebacks, resource_sharer
    WILD / "d_pytorch_dataloader_feeder_emfile_hang",  # the queue feeder thread
    WILD / "c_caduceus_dataloader_worker_start_pipe_emfile",  # frames without their Traceback header
    WILD / "c_maskrcnn_shared_fd_dup_emfile",
    RUNS / "lightning_dataloader_emfile",
])
def test_emfile_in_a_dataloader_is_data_loading(case):
    inc = _root(case)
    assert inc.initiating.signature in ("os.emfile", "torch.dataloader-too-many-open-files")
    assert inc.initiating.phase == "data-loading"
    assert "(checkpoint save)" not in inc.summary and "(data loading)" in inc.summary


def test_an_errno_is_not_labelled_checkpoint_save_without_evidence():
    # the rank leaks metrics/step_*.json files: an EMFILE, but no checkpoint in sight
    inc = _root(RUNS / "two_node_emfile")
    assert inc.initiating.signature == "os.emfile" and "(checkpoint save)" not in inc.summary
    # torch.save's frames say it is a save
    inc = _root(WILD / "a_dolly_enospc_torch_save")
    assert inc.initiating.phase == "checkpoint-save"


def test_semlock_enospc_is_dev_shm():
    inc = _root(WILD / "d_vits_semlock_enospc_mp_spawn")
    assert inc.initiating.signature == "os.shm-enospc"
    assert inc.initiating.fields["seen_as"] == "os.enospc"
    assert any("/dev/shm" in e for e in inc.evidence)


@pytest.mark.parametrize("case", ["d_jax_toolbox_sigbus_in_ncclshmopen", "d_pipedream_ucx_bus_error_nccl_docker_shm"])
def test_a_bus_error_inside_nccl_is_its_dev_shm(case):
    inc = _root(WILD / case)
    assert inc.initiating.signature == "nccl.shm-attach-failed"
    assert inc.initiating.fields["seen_as"] == "proc.fatal-signal"
    assert any("/dev/shm" in e and "bus error" in e for e in inc.evidence)


def test_a_bus_error_outside_nccl_stays_a_fatal_signal():
    # a truncated memory-mapped file: SIGBUS in the rank's own code, not /dev/shm
    inc = _root(RUNS / "sigbus_truncated_mmap")
    assert inc.initiating.signature == "proc.fatal-signal"


def test_unhandled_system_error_with_a_socket_warn_is_not_dev_shm():
    inc = _root(WILD / "d_nccltests_unhandled_system_error_no_ip_interface")
    assert inc.initiating.signature == "nccl.system-error"
    assert not any("/dev/shm" in e for e in inc.evidence)
