"""Issue 21's mechanisms on real lines: a report that names the faulty rank (DCP's
CheckpointException on every rank), a store key naming the missing rank, the Flight Recorder's
dump signal naming the detecting rank, and a GPU Xid with its catalog meaning."""

import shutil
from pathlib import Path

from denpex_tui.core.scan import scan_paths
from denpex_tui.core.xid import xid_evidence, xid_info

RUNS = Path(__file__).parent / "fixtures" / "runs"
WILD = Path(__file__).parent / "fixtures" / "wild"


def _root(paths):
    r = scan_paths([str(p) for p in paths], include_user=False)
    return next(i for i in r.incidents if i.initiating is not None)


def test_dcp_checkpoint_exception_names_the_rank_that_failed():
    # Every rank prints the same CheckpointException ranks:dict_keys([2]); rank 0 prints it first.
    inc = _root([RUNS / "dcp_edquot_rank2" / "console.log"])
    assert inc.initiating.rank == 2
    assert inc.initiating.signature in ("dcp.checkpoint-exception", "os.edquot")
    assert sorted(c.rank for c in inc.collateral) == [0, 1, 3]


def test_dcp_report_of_another_rank_is_collateral_even_when_printed_first(tmp_path):
    # Only rank 0's report (lines 21-60 of the real run): it names rank 2, so rank 2 is initiating.
    lines = (RUNS / "dcp_edquot_rank2" / "console.log").read_text().splitlines()
    own = [ln for ln in lines if ln.startswith("[default0]:")]
    p = tmp_path / "rank0.log"
    p.write_text("\n".join(own) + "\n")
    inc = _root([p])
    assert inc.initiating.rank == 2


def test_store_key_names_the_rank_that_never_arrived():
    inc = _root([RUNS / "stalled_before_init" / "console.log"])
    assert inc.initiating.rank == 2 and inc.initiating.signature == "dist.rank-stalled"


def test_flight_recorder_dump_signal_names_the_detecting_rank(tmp_path):
    src = WILD / "c_primerl_alltoall_timeout_dump_from_rank13" / "stderr.log"
    shutil.copy(src, tmp_path / "stderr.log")
    inc = _root([tmp_path / "stderr.log"])
    assert inc.initiating.rank == 13
    assert inc.initiating.signature == "dist.collective-timeout"
    assert any("detected the collective timeout first" in e for e in inc.evidence)
    assert inc.confidence == "low"


def test_xid_line_carries_the_catalog_meaning_and_action(tmp_path):
    # The Xid line quoted in NVIDIA/open-gpu-kernel-modules#1151.
    p = tmp_path / "dmesg.txt"
    p.write_text("May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n")
    inc = _root([p])
    assert inc.initiating.signature == "cuda.xid"
    ev = " ".join(inc.evidence)
    assert "Xid 79 on GPU PCI:0000:2b:00" in ev and "drain the node" in ev


def test_fallen_off_the_bus_without_an_xid_line():
    inc = _root([WILD / "c_nvsentinel_nvrm_fallen_off_bus_no_xid" / "dmesg.txt"])
    assert inc.initiating.signature == "gpu.fallen-off-bus"


def test_unknown_xid_is_not_guessed():
    assert xid_info(31) is None
    assert "not among the codes" in xid_evidence({"xid": "31"})
    assert xid_info(48).hardware and not xid_info(13).hardware
