"""A log without ranks (one process's plain log) is not torchrun's agent: the findings list said
'▶ FIRST agent  os.enospc' for a rank-less training log whose headline said 'the process (no rank
in its lines)' (seen in tmux). The agent is named only for the launcher's own findings."""

from __future__ import annotations

import asyncio
import os

from test_app_support import make_app, settle, until

from denpex_tui.app.widgets.findings import FindingList

CORPUS = os.path.join(os.path.dirname(__file__), "fixtures", "corpus")

PLAIN = [f"2026-11-30 10:00:{i:02d},120 INFO train: step {i}/500 | loss {3 - i / 40:.4f} | lr 3.0e-04"
         for i in range(1, 45)] + [
    "Traceback (most recent call last):",
    '  File "/scratch/denpex-jobs/run41/train.py", line 212, in <module>',
    "    save_checkpoint(model, step)",
    '  File "/scratch/denpex-jobs/run41/train.py", line 139, in save_checkpoint',
    "    torch.save(state, path)",
    "OSError: [Errno 28] No space left on device: '/ckpt/global_step44/model_states.pt'",
]


def _rows(root, want, size=(120, 36)):
    async def go():
        app = make_app(root)
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)

            def rows():  # the rows' text as the list renders them
                fl = app.query_one(FindingList)
                return [str(fl.get_option_at_index(i).prompt) for i in range(fl.option_count)]

            await until(pilot, lambda: any(want in r for r in rows()), timeout=10)
            return rows()

    return asyncio.run(go())


def test_a_rank_less_log_is_not_called_the_agent(tmp_path):
    root = tmp_path / "plain"
    root.mkdir()
    (root / "train.log").write_text("\n".join(PLAIN) + "\n")
    rows = _rows(str(root), "os.enospc")
    first = next((r for r in rows if "os.enospc" in r), rows)
    assert "agent" not in first and "no rank" in first, rows


def test_the_launchers_own_findings_are_still_the_agents():
    rows = _rows(os.path.join(CORPUS, "enospc_checkpoint_fastfail"), "torchelastic.child-failed", size=(200, 60))
    assert any("agent" in r and "torchelastic.child-failed" in r for r in rows), rows
