"""watch over two nodes: the probes of each node arrive through a transport (here the real
`denpex probe --stream --json` started by `sh -c`, as --probe-cmd would), the rank table shows
each rank's remote pid and fds, the gauges are grouped by node (the worst first), and the
differential of the failing rank is computed from its own node's readings."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
from test_app_support import make_app, settle

from denpex_tui.app.remote import group_by_node
from denpex_tui.app.widgets.gauges import Gauges
from denpex_tui.app.widgets.ranks import RankTable
from denpex_tui.probes.transports import ChannelSpec

from localcluster import DENPEX
from test_app_pilot import failed_root  # noqa: F401 - the module fixture


@pytest.fixture
def ranks():
    """Eight processes that look like ranks 0-7 of the demo job (RANK in their environment)."""
    procs = {}
    for r in range(8):
        procs[r] = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                    stdin=subprocess.PIPE,
                                    env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r % 4), WORLD_SIZE="8"))
    yield procs
    for p in procs.values():
        p.kill()
        p.wait()


def _node(name: str, pids: list[int], path: str) -> ChannelSpec:
    cmd = (f"exec {DENPEX} probe --stream --json --interval 0.3 --path {path} --pid "
           + " ".join(map(str, pids)))
    return ChannelSpec(f"cmd {name}", ["/bin/sh", "-c", cmd], [name])


def test_watch_two_nodes_remote_fds_and_the_failing_ranks_own_node(failed_root, ranks, tmp_path):  # noqa: F811
    # the demo's rank 5 runs on gpu-node-01 (its log says so); ranks 0-3 on gpu-node-02
    specs = [_node("gpu-node-02", [ranks[r].pid for r in range(4)], str(tmp_path)),
             _node("gpu-node-01", [ranks[r].pid for r in range(4, 8)], failed_root)]

    async def main():
        app = make_app(failed_root, probes=True, probe_specs=specs)
        async with app.run_test(size=(200, 50)) as pilot:
            await settle(app, pilot)
            table = app.query_one(RankTable)
            t_end = time.monotonic() + 40
            while time.monotonic() < t_end:
                await pilot.pause(0.2)
                try:
                    if (table.get_cell("5", "pid").plain == str(ranks[5].pid)
                            and table.get_cell("1", "pid").plain == str(ranks[1].pid)):
                        break
                except Exception:
                    pass
            assert table.get_cell("5", "pid").plain == str(ranks[5].pid)
            assert table.get_cell("1", "pid").plain == str(ranks[1].pid)
            fds = table.get_cell("5", "fds").plain
            assert "/" in fds and int(fds.split("/")[0]) >= 3  # fds/soft limit of the remote process
            g = app.query_one(Gauges)
            groups = group_by_node(g.snapshot)
            assert {n for n, *_ in groups} == {"gpu-node-01", "gpu-node-02"}
            text = g._text().plain
            assert "node gpu-node-01 · ok" in text and "node gpu-node-02 · ok" in text
            assert all(p.node == "gpu-node-02" for p in groups[[n for n, *_ in groups].index("gpu-node-02")][3])
            # the failing rank's differential: measured from gpu-node-01's probe stream
            t_end = time.monotonic() + 40
            diff = None
            while time.monotonic() < t_end and diff is None:
                await pilot.pause(0.2)
                for (_m, d) in app._metrics.values():
                    if d is not None:
                        diff = d
            assert diff is not None, app._metrics
            assert diff.caveats[0].startswith("measured on node gpu-node-01, the rank's own node")
            fd_holders = [c for c in diff.candidates if c.cause == "deleted-open"]
            assert fd_holders  # an ENOSPC differential
            assert diff.measured_at_unix <= time.time() and diff.node == "gpu-node-01"
            from textual.widgets import Static

            from denpex_tui.app.widgets.fixpanel import FixPanel

            def panel_text():
                return "\n".join(str(w.render()) for w in app.query_one(FixPanel).query(Static))

            t_end = time.monotonic() + 20
            while time.monotonic() < t_end and "on node gpu-node-01" not in panel_text():
                await pilot.pause(0.2)
            assert "on node gpu-node-01" in panel_text()

    asyncio.run(main())


def test_group_by_node_puts_a_dead_node_then_the_fullest_first():
    from denpex_tui.probes.readings import PathReading, Snapshot

    s = Snapshot(time=0.0, host="head", paths=[
        PathReading("/ckpt", node="a", bytes_total=100, bytes_free=50),
        PathReading("/ckpt", node="b", bytes_total=100, bytes_free=2),
        PathReading("/ckpt", node="c", bytes_total=100, bytes_free=90)])
    s.nodes = [{"node": "a", "status": "ok"}, {"node": "b", "status": "ok"},
               {"node": "c", "status": "ok"}, {"node": "d", "status": "no-answer"}]
    assert [g[0] for g in group_by_node(s)] == ["d", "b", "a", "c"]


def test_skew_note_on_a_real_four_node_incident():
    """The corpus's DeepSpeed run on node0-3: rank 2 (node2) hits ENOSPC one second before the
    others' collateral errors. With the nodes' clocks agreeing there is nothing to say; when
    node2's clock is 2 s behind, the order reverses; within the clocks' spread it is uncertain."""
    from denpex_tui.core.scan import scan_paths
    from denpex_tui.probes.skew import SkewEstimator

    from helpers import CORPUS

    inc = scan_paths([str(CORPUS / "deepspeed_enospc_checkpoint")]).incidents[0]
    assert (inc.initiating.rank, inc.initiating.node) == (2, "node2")
    from denpex_tui.app.remote import skew_note

    def offsets(behind: dict[str, float], jitter: float):
        sk = SkewEstimator()
        for i in range(10):
            for n in ("node0", "node1", "node2", "node3"):
                d = 0.002 + (jitter if i % 2 else 0.0)
                sk.sample(n, 1000.0 + i, 1000.0 + i + behind.get(n, 0.0) + d)
        return sk.offsets()

    assert skew_note(inc, offsets({}, 0.001)) is None
    note = skew_note(inc, offsets({"node2": 2.0}, 0.001))
    assert note and "failed before rank 2 on node2" in note
    note = skew_note(inc, offsets({"node2": 0.5}, 0.8))
    assert note and "uncertain" in note
    assert skew_note(inc, {}) is None
