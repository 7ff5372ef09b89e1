"""No frame of ``watch`` shows a confident diagnosis that the full read overturns (issue 18).

A real failing job (the corpus's enospc_checkpoint_fastfail: rank 2's torch.save hits ENOSPC, the
three others lose their connection to it) made long the way a real long run is long: its own
training step lines, many thousands of them, before the failure. The
app runs headless through Textual's pilot; the header is sampled, as rendered, every few
milliseconds while the history loads. Every sample taken before the history is read says so
(``reading history N %``) and marks any diagnosis ``so far``, never at high confidence; every
unmarked diagnosis is the final one."""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from pathlib import Path

from denpex_tui.app.factory import WatchOptions, make_app
from denpex_tui.app.widgets.status import StatusBar
from denpex_tui.core.catalog import load_catalog

CASE = Path(__file__).parent / "fixtures" / "corpus" / "enospc_checkpoint_fastfail"
STEP = re.compile(rb" train: step \d+/")


def _lengthen(src: Path, dst: Path, target: int) -> int:
    """The case's per-rank log folder, as a job that logs to stderr (Python logging's default) and
    does not record error files: rank 2's stderr gets its own step lines, repeated until the job
    holds about ``target`` bytes, before its traceback. The other ranks' short logs, with their
    timeouts, are read long before the line that explains them. Returns the bytes written."""
    shutil.copytree(src / "logs", dst)
    for p in dst.rglob("error.json"):
        p.unlink()
    rank2 = next(dst.rglob("attempt_0/2"))
    steps = b"".join(x for x in (rank2 / "stdout.log").read_bytes().splitlines(keepends=True) if STEP.search(x))
    err = (rank2 / "stderr.log").read_bytes()
    (rank2 / "stderr.log").write_bytes(steps * max(1, target // len(steps)) + err)
    return sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())


def _header(app) -> tuple[bool, str, str]:
    """(history still being read, the header as drawn, its diagnosis)."""
    st = app.state
    return (not st.history_complete, app.query_one(StatusBar).render().plain.replace("\n", " "),
            st.diagnosis(app.options.clock())[1])


NEUTRAL = ("waiting for log lines", "no failure signature so far (the history is still being read)")


async def _samples(root: Path, timeout: float) -> tuple[list[tuple[bool, str, str]], str]:
    app = make_app(WatchOptions(paths=[str(root)], processes=False, probes=False, root=str(root)),
                   load_catalog(include_user=False))
    seen: list[tuple[bool, str, str]] = []
    async with app.run_test(size=(160, 40)) as pilot:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            await pilot.pause(0.01)
            seen.append(_header(app))
            if app.state.history_complete and app.state.incident is not None:
                break
        assert app.state.history_complete, "the history was never read to its end"
        while "so far" in _header(app)[2]:  # the retriage after the last file (bounded)
            assert time.monotonic() < end, "the diagnosis stayed 'so far' after the whole history was read"
            await pilot.pause(0.05)
            seen.append(_header(app))
        final = _header(app)[2]
    return seen, final


def test_no_frame_shows_a_confident_diagnosis_the_full_read_overturns(tmp_path):
    root = tmp_path / "job"
    # big enough that the read outlasts the app's start-up (the pass begins before the first frame):
    # 48 MB was read whole before it once the history pass got faster, and no frame was ever "so far"
    assert _lengthen(CASE, root, 256 << 20) > 200 << 20
    seen, final = asyncio.run(_samples(root, timeout=240))
    assert final.startswith("rank 2 initiating: torch.save") and "so far" not in final, final
    claims = [(header, d) for reading, header, d in seen if reading and d not in NEUTRAL]
    assert claims, "no diagnosis was drawn while the history loaded: this job cannot test the rule"
    for header, d in claims:
        assert d.startswith("so far: ") or " so far" in d, d  # marked, whatever it says
        assert "confidence high" not in d, d
        assert "not in these logs" not in d, d  # unread is not absent
        assert "reading history" in header, header  # and the header says how far the read is
    for reading, header, d in seen:
        # once the whole history is read: the final answer, or (until the last retriage) a marked
        # one, or (under load, the read done and its triage not yet in) the final's own rank and
        # failure, said to have no incident yet: not confident, and the final does not contradict it
        pending = d.endswith(" (no incident yet)") and final.startswith(d.split(":", 1)[0] + " ") \
            and d.split(": ", 1)[1].removesuffix(" (no incident yet)") in final
        assert reading or d == final or d.startswith("so far: ") or " so far" in d or pending, d
