"""What a line says about *other* ranks: a registry of rank-role extractors.

A report printed by one rank often names another: PyTorch's monitored barrier names the rank
that did not arrive, torch.distributed.checkpoint raises the same ``CheckpointException`` on every
rank with the ranks that failed in its text, the Flight Recorder says which rank signalled the
dump, a c10d store key that never appeared ends in the rank that should have written it. Each such
shape is one small data entry here (:data:`EXTRACTORS`) — a regular expression whose ``ranks``
group holds one number or a list, the *role* those ranks play, and real example lines that run
as tests (``tests/test_rankroles.py``), the way the prefix formats of :mod:`.lineparse` are.

Roles:

* ``faulty``: the ranks whose own failure this report is about (the reporter is collateral unless
  it names itself);
* ``reporter``: the rank that *detected* a failure first and told the others (a detector, often a
  victim: evidence for a hang, never proof of a cause);
* ``missing``: the rank the reporter waited for and never heard from (a stalled or dead rank).

Triage reads roles from :func:`rank_roles` and nothing else; no rule elsewhere parses these texts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["RankRole", "RankExtractor", "EXTRACTORS", "rank_roles", "named"]

_N = r"\d{1,7}"
_LIST = rf"{_N}(?:, ?{_N})*"


@dataclass(frozen=True)
class RankRole:
    role: str  # faulty | reporter | missing
    ranks: tuple[int, ...]  # empty with ``self_rank``: the line's own rank
    extractor: str
    self_rank: bool = False


@dataclass(frozen=True)
class RankExtractor:
    """One shape of "this line names a rank in this role". ``rx``'s ``ranks`` group is the rank
    or a comma list; ``self_rank`` entries name the printing rank itself (no group).
    ``examples`` are real lines with the ranks they must give; ``source`` says where from."""

    name: str
    role: str
    rx: re.Pattern[str]
    examples: tuple[tuple[str, tuple[int, ...]], ...]
    source: str
    self_rank: bool = False


EXTRACTORS: tuple[RankExtractor, ...] = (
    RankExtractor(
        "dcp-checkpoint-exception", "faulty",
        re.compile(rf"CheckpointException ranks:dict_keys\(\[(?P<ranks>{_LIST})\]\)"),
        (("torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([2])", (2,)),
         ("intException: CheckpointException ranks:dict_keys([0, 1, 2, 3, 4, 5, 6, 7])", (0, 1, 2, 3, 4, 5, 6, 7))),
        "torch/distributed/checkpoint/api.py CheckpointException.__str__; runs/dcp_edquot_rank2, "
        "https://github.com/bghira/SimpleTuner/issues/1880",
    ),
    RankExtractor(
        "monitored-barrier", "faulty",
        re.compile(rf"Ranks? (?P<ranks>{_LIST}) failed to pass monitoredBarrier"),
        (("[Rank 0]: Rank 2 failed to pass monitoredBarrier in 10000 ms", (2,)),),
        "torch ProcessGroupGloo monitoredBarrier; runs/monitored_barrier",
    ),
    RankExtractor(
        "check-rank-logs", "faulty",
        re.compile(rf"(?:[Pp]lease check rank (?P<ranks>{_N}) logs? for (?:the )?faulty rank"
                   rf"|received errors while waiting for send/recv from rank (?P<ranks2>{_N}))"),
        (("Rank 1 successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0. "
          "Please check rank 0 logs for faulty rank.", (0,)),),
        "torch ProcessGroupGloo monitoredBarrier; runs/monitored_barrier",
    ),
    RankExtractor(
        "ray-train-worker-failed", "faulty",
        re.compile(rf"\((?:TorchTrainer|TrainTrainable|RayTrainWorker)[^)]*\) Worker (?P<ranks>{_N}) has failed\."),
        (("(TorchTrainer pid=89392) Worker 0 has failed.", (0,)),),
        "Ray Train's backend executor; https://github.com/ray-project/ray/issues/47461",
    ),
    RankExtractor(
        "flight-recorder-dump-from-rank", "reporter",
        re.compile(rf"Received a dump signal due to a collective timeout from {{1,2}}rank (?P<ranks>{_N})\b"),
        (("[rank0]:[E804 23:05:54.817424543 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received "
          "a dump signal due to a collective timeout from  rank 13 and we will try our best to dump the debug info.", (13,)),
         ("[rank5]:[E723 01:58:45.667329643 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 5] Received "
          "a dump signal due to a collective timeout from  rank 2 and we will try our best to dump the debug info.", (2,))),
        "ProcessGroupNCCL.cpp heartbeat monitor (the store's value is the detecting rank, PR #122850); "
        "https://github.com/PrimeIntellect-ai/prime-rl/pull/3186",
    ),
    RankExtractor(
        "flight-recorder-dump-local", "reporter",
        re.compile(r"Received a dump signal due to a collective timeout from this local rank"
                   r"|Received a timeout signal from this local rank"
                   r"|First PG on this rank to signal dumping"),
        (("[rank1]:[E603 04:19:16.570252694 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a "
          "dump signal due to a collective timeout from this local rank and we will try our best to dump the", ()),),
        "ProcessGroupNCCL.cpp; https://github.com/bytedance/Protenix/issues/321",
        self_rank=True,
    ),
    RankExtractor(
        "store-key-default-pg", "missing",
        re.compile(rf"keys?: \[?'?/?default_pg/{_N}//\w+//{_N}/(?P<ranks>{_N})'?\]?"),
        (("torch.distributed.DistStoreError: wait timeout after 20000ms, keys: /default_pg/0//cpu//0/2", (2,)),),
        "c10d store-based barrier key '<pg>//<device>//<seq>/<rank>'; runs/stalled_before_init",
    ),
    RankExtractor(
        "nccl-unique-id-from", "missing",
        re.compile(rf"retre?iv(?:e|ing) ncclUniqueId from \[(?P<ranks>{_N})\]"),
        (("RuntimeError: [1] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d key-value "
          "store by key '0', but store->get('0') got error: Timeout waiting for key: default_pg/0/0 after", (0,)),),
        "ProcessGroupNCCL::broadcastUniqueNCCLID; https://github.com/pytorch/pytorch/issues/82091",
    ),
)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.split(r", ?", text) if x.isdigit() and len(x) <= 7)


def rank_roles(text: str) -> list[RankRole]:
    """Every role the text gives to a rank, in registry order."""
    out: list[RankRole] = []
    for ex in EXTRACTORS:
        m = ex.rx.search(text)
        if not m:
            continue
        if ex.self_rank:
            out.append(RankRole(ex.role, (), ex.name, True))
            continue
        grp = next((v for k, v in m.groupdict().items() if k.startswith("ranks") and v), None)
        ranks = _ints(grp) if grp else ()
        if ranks:
            out.append(RankRole(ex.role, ranks, ex.name))
    return out


def named(text: str, role: str, own_rank: int | None = None) -> tuple[tuple[int, ...], str | None]:
    """(ranks, extractor) the text names in ``role``; a ``self_rank`` entry gives ``own_rank``."""
    for rr in rank_roles(text):
        if rr.role != role:
            continue
        if rr.self_rank:
            if own_rank is not None:
                return (own_rank,), rr.extractor
            continue
        return rr.ranks, rr.extractor
    return (), None
