"""The rank-role registry: every extractor on its own real example lines, and lines that name
no rank in any role."""

import pytest

from denpex_tui.core.rankroles import EXTRACTORS, named, rank_roles

EXAMPLES = [(e.name, e.role, line, ranks) for e in EXTRACTORS for line, ranks in e.examples]


@pytest.mark.parametrize("name,role,line,ranks", EXAMPLES, ids=[f"{n}[{i}]" for i, (n, *_x) in enumerate(EXAMPLES)])
def test_every_extractor_reads_its_own_examples(name, role, line, ranks):
    got = [r for r in rank_roles(line) if r.extractor == name]
    assert got, (name, line)
    assert got[0].role == role
    if got[0].self_rank:
        assert named(line, role, own_rank=7) == ((7,), name)
    else:
        assert got[0].ranks == ranks


@pytest.mark.parametrize(
    "line",
    [
        # a store key that ends in a sequence number, not a rank (ms-swift #4906, vLLM's pynccl barrier)
        "[rank0]: torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /broadcast_from/0/75465",
        # the watchdog's own timeout report names only itself
        "[rank2]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank 2] Watchdog caught collective operation timeout",
        # a rank number out of any sane range is text
        "CheckpointException ranks:dict_keys([" + "9" * 40 + "])",
        "Observed flight recorder dump signal from another rank via TCPStore.",
    ],
)
def test_lines_that_name_no_rank(line):
    assert all(not r.ranks for r in rank_roles(line) if not r.self_rank)
    assert named(line, "faulty") == ((), None) and named(line, "missing") == ((), None)
