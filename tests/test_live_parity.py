"""One state, not events, decides: every corpus case replayed live — written gradually into a
folder the engine follows — ends with the same diagnosis as `scan` over the same files
(rank, signature, collateral set, path and line of the initiating finding)."""

import asyncio
import threading
import time
from pathlib import Path

import pytest

from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.scan import scan_paths
from denpex_tui.live.engine import Engine

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "truth.json").is_file())
RUNS = Path(__file__).parent / "fixtures" / "runs"
# Log dirs alone (no console, no launcher record), where the diagnosis rests on where each rank
# stopped: a tqdm bar redrawn with carriage returns and never ended by a newline, step lines.
LOGDIRS = ["tqdm_oom_logdir_only", "oom_cgroup_kill", "fr_kill9_waiting"]
PARTS = 4
TIMEOUT_S = 60.0


def _key(incidents):
    out = []
    for i in incidents:
        init = i.initiating
        out.append((i.attempt, init.signature if init else None, init.rank if init else None,
                    init.path if init else None, init.line if init else None,
                    tuple(sorted((c.rank if c.rank is not None else -1) for c in i.collateral)),
                    tuple(sorted((s.rank if s.rank is not None else -1) for s in i.same_cause))))
    return out


def _replay(src: Path, dst: Path) -> None:
    """Write every file of ``src`` into ``dst`` in PARTS slices, round-robin over the files,
    as ranks writing at the same time would."""
    files = [p for p in sorted(src.rglob("*")) if p.is_file() and p.name != "truth.json"]
    slices = []
    for p in files:
        lines = p.read_bytes().splitlines(keepends=True)
        n = max(1, -(-len(lines) // PARTS))
        slices.append((dst / p.relative_to(src), [b"".join(lines[i:i + n]) for i in range(0, len(lines), n)]))
    for step in range(PARTS):
        for out, parts in slices:
            if step < len(parts):
                out.parent.mkdir(parents=True, exist_ok=True)
                with open(out, "ab") as fh:
                    fh.write(parts[step])
        time.sleep(0.05)


def _source(case: str) -> Path:
    return CORPUS / case if case in CASES else RUNS / case / "logs"


@pytest.mark.parametrize("case", CASES + LOGDIRS)
def test_live_replay_gives_the_scan_diagnosis(tmp_path, case):
    dst = tmp_path / case
    dst.mkdir()
    catalog = load_catalog(include_user=False)
    state = {"ref": None, "live": None}

    async def main():
        eng = Engine([str(dst)], catalog, processes=False, polite=False)
        writer = threading.Thread(target=_replay, args=(_source(case), dst))

        async def judge():
            deadline = time.monotonic() + TIMEOUT_S
            while writer.is_alive():
                await asyncio.sleep(0.1)
            state["ref"] = _key(scan_paths([str(dst)], include_user=False).incidents)
            stable_since = None
            while time.monotonic() < deadline:
                state["live"] = _key(eng.incidents)
                if state["live"] == state["ref"]:
                    stable_since = stable_since or time.monotonic()
                    if time.monotonic() - stable_since >= 1.0:  # and it stays so
                        break
                else:
                    stable_since = None
                await asyncio.sleep(0.1)
            eng.stop()

        task = asyncio.get_running_loop().create_task(judge())
        writer.start()
        async for _ev in eng.run():
            pass
        await task

    asyncio.run(main())
    assert state["live"] == state["ref"], f"live {state['live']}\n scan {state['ref']}"
    assert state["ref"] or case.endswith("clean_run")
