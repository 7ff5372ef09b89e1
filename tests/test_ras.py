"""NCCL RAS reports (tests/fixtures/ras/: NCCL's published samples and a user's report from
NVIDIA/nccl#1730, verbatim) and RAS lines in logs."""

from pathlib import Path

from denpex_tui.core.ras import parse_ras, sniff_ras
from denpex_tui.core.scan import scan_paths

RAS = Path(__file__).resolve().parent / "fixtures" / "ras"


def _read(name):
    return (RAS / name).read_text()


def test_the_reports_name_the_missing_ranks_and_the_dead_processes():
    r = parse_ras(_read("incomplete_stopped_process.txt"))
    assert r.missing_ranks == {21: None} and r.timeouts == 2
    assert [(p.pid, p.node, p.gpu) for p in r.unresponsive] == [(3487984, "172.16.64.213", "5")]
    r = parse_ras(_read("dead_process.txt"))
    assert [(p.pid, p.node) for p in r.dead] == [(3487984, "172.16.64.213")] and r.named_ranks == [21]
    r = parse_ras(_read("json_missing_rank.json"))
    assert r.missing_ranks[1].pid == 1524345 and r.missing_ranks[1].node == "172.16.64.245"
    r = parse_ras(_read("monitor_peer_dead.txt"))
    assert [(p.pid, p.gpu) for p in r.dead] == [(1524345, "1")]
    r = parse_ras(_read("mismatch_op_counts.txt"))
    assert sorted(r.outliers) == [0, 2, 3, 4, 5, 7] and r.outliers[0] == "launched up to operation 6649"
    assert parse_ras(_read("healthy_nccl_issue_1730.txt")).empty


def test_current_nccl_names_the_missing_rank_with_its_process():
    # NCCL's client_support.cc today prints the missing rank's process under the communicator
    text = ("#0-0 (cf264af53edbe986) INCOMPLETE\n  Missing communicator data from 1 rank\n"
            "  Rank 21 -- GPU 5 managed by process 3487984 on node 172.16.64.213\n\n"
            "DEAD\n  1 job process is considered dead (unreachable via the RAS network)\n"
            "  Process 3487984 on node 172.16.64.213 managing GPU 5\n")
    r = parse_ras(text)
    assert r.missing_ranks[21].pid == 3487984
    assert r.dead[0].rank == 21  # the dead process is the missing rank's


def test_sniffing_and_prefixed_lines():
    for f in RAS.iterdir():
        if f.suffix != ".md":
            assert sniff_ras(f.read_bytes()), f.name
    assert not sniff_ras(b"2026-12-01 INFO train: step 3\n")
    logged = "\n".join(f"[default0]:[rank0]: {line}" for line in _read("dead_process.txt").splitlines())
    assert parse_ras(logged).named_ranks == [21]


def test_scan_of_a_report_names_the_rank(tmp_path):
    r = scan_paths([str(RAS / "dead_process.txt")], include_user=False)
    inc = r.incidents[0]
    # the report's first error (DEAD) is the finding; the INCOMPLETE section's missing rank gives its rank
    assert inc.initiating.rank == 21 and inc.initiating.signature == "nccl.ras-dead-process"
    assert any("names rank 21 as the one that failed (or is missing)" in e for e in inc.evidence)
    assert any("process 3487984 on node 172.16.64.213" in e for e in inc.evidence)
    assert inc.initiating.line > 0 and inc.initiating.path.endswith("dead_process.txt")
    assert scan_paths([str(RAS / "healthy_nccl_issue_1730.txt")], include_user=False).incidents == []


def test_a_ras_line_in_a_log_blames_the_rank(tmp_path):
    log = tmp_path / "console.log"
    log.write_text("[default0]:2026-12-01 10:00:00,000 INFO [rank0/32] ras: querying NCCL RAS\n"
                   + "".join(f"[default0]:{line}\n" for line in _read("dead_process.txt").splitlines()))
    r = scan_paths([str(log)], include_user=False)
    sigs = {f.signature for f in r.findings}
    assert {"nccl.ras-missing-rank", "nccl.ras-dead-process"} <= sigs
    assert r.incidents and r.incidents[0].initiating.rank == 21
