"""Every real run in the corpus, scored against its truth.json.

Each case is scanned three ways (the whole folder, only the per-rank log trees, only the
console logs): the diagnosis must not depend on which copy of the lines the user has.
"""

import json

import pytest

from denpex_tui.core.lines.facts import parse_line
from denpex_tui.core.scan import scan_paths

from helpers import CORPUS

CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "truth.json").exists())
# corpus/README.md: truth.json's descriptive names -> catalog ids that are right
SIG_MAP = {
    "enospc_checkpoint_save": {"torch.save-write-failed", "os.enospc"},
    "emfile_fd_leak_checkpoint": {"os.emfile"},
    "rank_stalled_hang": {"dist.rank-stalled"},
    "shm_enospc_dataloader": {"os.shm-enospc"},
}
COLLATERAL_MAP = {
    "gloo_connection_closed_by_peer": {"dist.peer-closed"},
    "gloo_timeout_in_barrier": {"dist.collective-timeout"},
}


def truth(case):
    return json.loads((CORPUS / case / "truth.json").read_text())


def variants(case):
    root = CORPUS / case
    consoles = sorted(str(p) for p in root.rglob("console.log"))
    trees = sorted(str(p) for p in root.rglob("logs") if p.is_dir())
    out = [("all", [str(root)])]
    if trees:
        out.append(("rank-files", trees))
    if consoles:
        out.append(("consoles", consoles))
    return out


def _initiating_locations(t, case):
    locs = set()
    for rel, info in (t.get("initiating_error_in_files") or {}).items():
        for k in ("first_error_line", "exception_line"):
            if k in info:
                locs.add((str(CORPUS / case / rel), info[k]))
    fe = t.get("first_error_line")
    if fe:
        locs.add((str(CORPUS / case / fe["file"]), fe["line"]))
    for items in (t.get("scan") or {}).values():
        for it in items:
            locs.add((str(CORPUS / case / it["file"]), it["line"]))
    return locs


@pytest.mark.parametrize("case", CASES)
def test_case_matches_truth(case):
    t = truth(case)
    for name, paths in variants(case):
        r = scan_paths(paths, include_user=False)
        where = f"{case} [{name}]"
        if t["signature"] == "none":
            assert r.incidents == [], f"{where}: a clean run must give no incident: {[i.summary for i in r.incidents]}"
            assert not [f for f in r.findings if f.severity == "error"], where
            continue
        assert len(r.incidents) == 1, f"{where}: {[i.summary for i in r.incidents]}"
        inc = r.incidents[0]
        init = inc.initiating
        assert init is not None, where
        assert init.signature in SIG_MAP[t["signature"]], f"{where}: {init.signature}"
        if t["initiating_rank"] is not None:
            assert init.rank == t["initiating_rank"], f"{where}: rank {init.rank}"
            assert {c.rank for c in inc.collateral} == set(t["collateral_ranks"]), where
            want = COLLATERAL_MAP.get(t.get("collateral_signature"), set())
            if want:
                assert {c.signature for c in inc.collateral} <= want, where
            if t["signature"] == "rank_stalled_hang":
                assert {c.signature for c in inc.collateral} <= {"dist.collective-timeout"}, where
        else:  # node-level cause: one rank initiating, the others same_cause, order undecided
            ranks = set(t["failed_ranks_same_cause"])
            assert init.rank in ranks, where
            assert {s.rank for s in inc.same_cause} == ranks - {init.rank}, where
            assert inc.confidence == "low", where
            assert inc.collateral == [], where
        # The line is the start of the initiating rank's report (traceback or ERROR line), in
        # one of the files that hold it.
        assert (init.path, init.line) in _initiating_locations(t, case) or _same_line_as_truth(t, init), (
            f"{where}: {init.path}:{init.line}"
        )


def _same_line_as_truth(t, init):
    """Another copy of truth's first error line (truth lists some copies, not all of them)."""
    fe = t.get("first_error_line")
    if not fe or init.line < 1:
        return False
    with open(init.path, encoding="utf-8", errors="replace") as fh:
        for i, line in enumerate(fh, 1):
            if i == init.line:
                return parse_line(line.rstrip("\n")).text == parse_line(fe["text"]).text
    return False


@pytest.mark.parametrize("case", CASES)
def test_json_face_is_stable(case):
    r = scan_paths([str(CORPUS / case)], include_user=False)
    doc = json.loads(json.dumps(r.to_json()))
    assert doc["schema"] == 1
    assert set(doc) >= {"schema", "sources", "findings", "incidents"}
    for s in doc["sources"]:
        assert set(s) >= {"path", "ranks", "node", "lines"}
    for f in doc["findings"]:
        assert set(f) >= {"signature", "title", "role", "rank", "node", "path", "line", "time", "text", "count"}
        assert f["line"] >= 1
    for i in doc["incidents"]:
        assert set(i) >= {"attempt", "initiating", "collateral", "same_cause", "first_warning", "confidence",
                          "evidence", "summary"}
        assert i["confidence"] in ("high", "medium", "low")


def test_duplicate_copies_count_once_and_point_at_rank_file():
    case = CORPUS / "enospc_checkpoint_fastfail"
    r = scan_paths([str(case)], include_user=False)
    inc = r.incidents[0]
    # The same traceback is in console.log (--tee), the rank's stderr.log, error.json and the
    # agent's failure report: one finding, counted once, at the per-rank file.
    assert inc.initiating.count == 1
    assert "/attempt_0/2/" in inc.initiating.path and inc.initiating.path.endswith("stderr.log")


def test_torchrun_root_cause_is_not_trusted():
    # fd_leak_emfile: torchrun's Root Cause named rank 0 (a victim); Denpex names rank 3 and
    # says why the launcher's summary is not used.
    r = scan_paths([str(CORPUS / "fd_leak_emfile")], include_user=False)
    inc = r.incidents[0]
    assert inc.initiating.rank == 3
    assert any("Root Cause" in e and "not trusted" in e for e in inc.evidence)


def test_hang_evidence_names_the_silent_rank():
    r = scan_paths([str(CORPUS / "stalled_rank_hang")], include_user=False)
    inc = r.incidents[0]
    assert inc.initiating.signature == "dist.rank-stalled"
    assert "Saved checkpoint shard for step 80" in inc.initiating.text
    assert any("only rank" in e for e in inc.evidence)
