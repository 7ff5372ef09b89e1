"""Triage rules beyond the corpus cases, on real message texts."""

from denpex_tui.core.scan import scan_paths

# DeepSpeed's logger format (failure-messages.md B2) around real message texts: the corpus's
# unrelated lr-scheduler warning, A11's NVMe warning, then A1's ENOSPC on a swap file.
LR_WARN = ("[2026-11-29 10:00:01,000] [WARNING] [lr_schedules.py:759:get_lr] Attempting to get learning rate from "
           "scheduler before it has started")
NVME_WARN = ("[2026-11-29 10:00:02,000] [WARNING] [logging.py:107:log_dist] Offloading to NVMe can generate heavy "
             "write traffic. On consumer/home SSDs, repeatedly offloading data (e.g. optimizer states, hidden states) "
             "can blow through the drive's rated write endurance (TBW) and shorten its lifespan. Prefer "
             "enterprise/datacenter SSDs for sustained offloading workloads.")
STEP = "[2026-11-29 10:00:05,000] [INFO] [logging.py:123:log_dist] [Rank 3] step=10, skipped=0, lr=[0.0003], mom=[(0.9, 0.999)]"
A1 = "deepspeed_aio:   open for write  failed on /local_nvme/zero_stage_3/optimizer/rank3/41.tensor.swp error = 28"


def test_first_related_warning_on_the_initiating_rank(tmp_path):
    log = tmp_path / "rank3.log"
    log.write_text("\n".join([LR_WARN, NVME_WARN, STEP, A1]) + "\n")
    r = scan_paths([str(log)], include_user=False)
    inc = r.incidents[0]
    assert inc.initiating.signature == "deepspeed.nvme-offload-enospc"
    assert inc.initiating.rank == 3
    w = inc.first_warning
    assert w is not None and w["line"] == 2 and "Offloading to NVMe" in w["text"]


def test_unrelated_warning_is_not_reported(tmp_path):
    log = tmp_path / "rank3.log"
    log.write_text("\n".join([LR_WARN, STEP, A1]) + "\n")
    r = scan_paths([str(log)], include_user=False)
    assert r.incidents[0].first_warning is None


def test_nvme_enospc_refines_generic_enospc_and_fills_the_nvme_path(tmp_path):
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.core.fixes import fix_panel

    log = tmp_path / "rank3.log"
    log.write_text("\n".join([STEP, A1]) + "\n")
    r = scan_paths([str(log)], include_user=False)
    panel = fix_panel(r.incidents[0].initiating, load_catalog(include_user=False), r.job)
    assert panel.values["path"] == "/local_nvme/zero_stage_3/optimizer/rank3/41.tensor.swp"
    assert panel.values["nvme_path"] == "/local_nvme"
    assert any(c.text.startswith("df -h -- /local_nvme && df -i -- /local_nvme") for c in panel.commands if c.complete)


def _nccl_job(tmp_path, n=300, stalled=137):
    """n ranks, one file each (Slurm-style rank files). Every rank but `stalled` prints the real
    ProcessGroupNCCL watchdog timeout (failure-messages.md D1 and D2) after its last step."""
    for r in range(n):
        lines = [f"[2026-11-29 10:00:{s:02d},000] [INFO] [logging.py:123:log_dist] [Rank {r}] step={s}, skipped=0"
                 for s in range(0, 40 if r != stalled else 30)]
        if r != stalled:
            lines += [
                f"[rank{r}]:[E1129 10:10:40.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=20585, OpType=ALLREDUCE, NumelIn=131072000, NumelOut=131072000, "
                "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.",
                f"[rank{r}]:[E1129 10:10:40.482119928 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank {r}]"
                "  failure detected by watchdog at work sequence id: 20585 PG status: last enqueued work: 20589, "
                "last completed work: 20584",
            ]
        (tmp_path / f"train-{r}.log").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_300_ranks_of_nccl_timeouts_name_the_silent_rank(tmp_path):
    job = _nccl_job(tmp_path)
    r = scan_paths([str(job)], include_user=False)
    assert len(r.incidents) == 1
    inc = r.incidents[0]
    assert inc.initiating.signature == "dist.rank-stalled" and inc.initiating.rank == 137
    assert "step=29" in inc.initiating.text
    assert len(inc.collateral) == 299 and {c.signature for c in inc.collateral} == {"nccl.watchdog-timeout"}
    assert inc.confidence == "high"


def test_300_collateral_findings_fold_into_one_row(tmp_path):
    import subprocess
    import sys

    job = _nccl_job(tmp_path)
    out = subprocess.run([sys.executable, "-m", "denpex_tui", "scan", "--no-measure", str(job)],
                         capture_output=True, text=True).stdout
    assert "ranks 0-136,138-299  nccl.watchdog-timeout" in out
    assert out.count("nccl.watchdog-timeout") <= 3


def test_the_first_warning_is_read_once_while_its_inputs_stay(tmp_path):
    """A diagnosis "so far" is triaged every quarter second while a history is read: the first
    related warning is looked for again only when the rank's files or the finding change."""
    from denpex_tui.core.catalog import load_catalog
    from denpex_tui.core.lines.reader import read_tail
    from denpex_tui.core.triage import triage

    log = tmp_path / "rank3.log"
    log.write_text("\n".join([LR_WARN, NVME_WARN, STEP, A1]) + "\n")
    r = scan_paths([str(log)], include_user=False)
    reads: list[str] = []

    def counting(path, end, n):
        reads.append(path)
        return read_tail(path, end, n)

    cat = load_catalog(include_user=False)
    first = triage(r.job, cat, read_tail=counting)[0].first_warning
    again = triage(r.job, cat, read_tail=counting)[0].first_warning
    assert first == again and "Offloading to NVMe" in first["text"]
    assert reads == [str(log)]  # the second triage read nothing
    with log.open("a") as fh:  # the rank's file grew: looked at again
        fh.write(STEP + "\n")
    triage(r.job, cat, read_tail=counting)
    assert reads == [str(log)] * 2
