"""Named groups in signature patterns become a finding's fields: every positive example of a
signature that declares groups yields them, with the values the real line carries."""

import re

import pytest

from denpex_tui.core.catalog import BUILTIN_DIR, load_pack
from denpex_tui.core.lines.facts import parse_line

# The field names consumers know; a typo in a pack's group name would silently drop the field.
KNOWN = {
    "rank", "blamed_rank", "blamed_ranks", "pid", "host", "exitcode", "signum", "signame",
    "path", "peer", "status", "errno", "signal", "device", "is_localhost", "local_rank", "tasks", "desc", "methods",
    "xid", "pci_bus",  # core/xid.py reads them (the Xid catalog entry, the GPU it hit)
}

_GROUP = re.compile(r"\(\?P<([A-Za-z_][A-Za-z0-9_]*)>")


def _sigs():
    sigs, problems = load_pack(BUILTIN_DIR, builtin=True)
    assert not problems
    return sigs


def _fields(sig, text):
    for p in sig.patterns:
        m = p.search(text)
        if m:
            return {k: v for k, v in m.groupdict().items() if v is not None}
    return None


def test_group_names_are_known_fields():
    for s in _sigs():
        for p in s.patterns:
            for name in _GROUP.findall(p.source):
                assert name in KNOWN, f"{s.id}: unknown field {name!r}"


@pytest.mark.parametrize("sig", [s for s in _sigs() if any(_GROUP.search(p.source) for p in s.patterns)],
                         ids=lambda s: s.id)
def test_positive_examples_yield_fields(sig):
    """A positive example matched by a pattern that declares groups yields at least one field."""
    for e in sig.examples:
        if not e.match:
            continue
        text = parse_line(e.line).text
        first = next(p for p in sig.patterns if p.search(text))
        if _GROUP.search(first.source):
            assert _fields(sig, text), f"{sig.id}: no field from {e.line!r}"


CASES = [
    ("mpirun.process-signaled",
     "mpirun noticed that process rank 0 with PID 21183 on node host01 exited on signal 9 (Killed).",
     {"rank": "0", "pid": "21183", "host": "host01", "signum": "9", "signame": "Killed"}),
    ("mpirun.first-failed-process", "  Process name: [[2663,1],3]", {"rank": "3"}),
    ("horovod.process-exit-code", "Process 3 exit with status code 250.", {"rank": "3", "exitcode": "250"}),
    ("dist.monitored-barrier",
     "RuntimeError: [Rank 0]: Ranks 4, 5, 6, 7 failed to pass monitoredBarrier in 2000000 ms",
     {"blamed_ranks": "4, 5, 6, 7"}),
    ("dist.monitored-barrier",
     "[rank1]: RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while "
     "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.",
     {"blamed_rank": "0"}),
    ("nccl.ib-completion-error",
     "H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
     "fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)",
     {"peer": "fe80::966d:ae03:8b:df78%ib0<53249>", "status": "4"}),
    ("nccl.shm-attach-failed",
     "ubuntu:9621:9691 [6] misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-fjwOOB to 5967876 bytes",
     {"path": "/dev/shm/nccl-fjwOOB"}),
    ("horovod.stall", "v0/tower_0/HorovodAllreduce_v0_tower_0_gradients_AddN_37_0 [missing ranks: 815]",
     {"blamed_ranks": "815"}),
    ("horovod.stall",
     "[1,0]<stderr>:2: [HorovodBroadcast_Variable_0, HorovodBroadcast_Variable_1_0, HorovodBroadcast_Variable_2_0]",
     {"blamed_ranks": "2"}),
    ("horovod.stall",
     "[0] 1: [broadcast.assign_conv_block_modules.0.0.bias, broadcast.assign_conv_block_modules.0.0.weight, "
     "broadcast.assign_conv_first_modules.0.bias, broadcast.assign_conv_first_modules.0.weight, "
     "broadcast.assign_conv_last_modules.0.bias, broadcast.assign_conv_last_modules.0.weight ...]",
     {"blamed_ranks": "1"}),
    # Horovod 0.13 listed the ranks that were READY: no rank is blamed from that line.
    ("horovod.stall",
     "WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
     "waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to "
     "submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. Stalled "
     "ops: allreduce.conv1.weight [ready ranks: 5, 1, 4, 7, 2, 3], allreduce.bn1.weight [ready ranks: 5, 1, 4, 7, 2, 3]",
     {}),
    ("ib.completion-error", "mlx5: cn10: got completion with error:", {"host": "cn10"}),
]


@pytest.mark.parametrize("sid,line,expected", CASES, ids=[c[0] for c in CASES])
def test_field_values(sid, line, expected):
    sig = next(s for s in _sigs() if s.id == sid)
    assert _fields(sig, parse_line(line).text) == expected


def test_redacted_pid_is_no_field():
    """mpirun with the PID redacted by the reporter: rank and host stay, pid is absent."""
    sig = next(s for s in _sigs() if s.id == "mpirun.process-signaled")
    got = _fields(sig, "mpirun noticed that process rank 1 with PID xxxxxx on node n1 exited on signal 9 (Killed).")
    assert got == {"rank": "1", "host": "n1", "signum": "9", "signame": "Killed"}
