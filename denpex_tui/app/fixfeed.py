"""The fix panel's feed: which finding it shows, its checklist computed off the UI loop (with the
probe's measurements and the finding's rank's working directory), and the measurement asked
for. A mixin of :class:`~denpex_tui.app.app.DenpexApp` (kept apart so each module stays small).
"""

from __future__ import annotations

from textual import work

from denpex_tui.core.model import Finding

from . import explaining
from .messages import FixReady, Measured
from .model import WatchState
from .widgets.fixpanel import FixPanel

__all__ = ["FixFeed"]


class FixFeed:
    """Handlers use Textual's naming convention (``on_<message>``), as in a mixin they must."""

    def on_measured(self, msg: Measured) -> None:
        if self._exit or not self.is_running:  # a worker message arriving while the app tears down
            return
        self._metrics[msg.key] = (msg.metrics, msg.differential)
        if msg.key == self._fix_key and self._fix_finding is not None:
            self._compute_fix(self._fix_key, self._fix_finding, "measured", msg.metrics, msg.differential)

    def show_fix(self, finding: Finding, origin: str) -> None:
        key = (WatchState.finding_key(finding), finding.path, finding.line)
        self._fix_key, self._fix_finding, self._fix_origin = key, finding, origin
        metrics, diff = self._metrics.get(key, (None, None))
        self._compute_fix(key, finding, origin, metrics, diff)

    @work(group="fix", exclusive=True, exit_on_error=False)
    async def _compute_fix(self, key, finding: Finding, origin: str, metrics, diff) -> None:
        cwd = self._fix_cwd = self._process_cwd(finding)
        data = await self.engine.call(explaining.fix_data, finding, self.catalog, self.engine.job, metrics, cwd)
        self.post_message(FixReady(key, finding, data, diff, origin))
        if metrics is None and self.probe is not None and data.signature is not None:
            # a relative path whose job directory is unknown is not measured here (it would be
            # resolved against this process's directory, another folder)
            path = None if data.values.get("job_dir_known") is False else (
                data.values.get("path") or data.values.get("ckpt_dir"))
            self.probe.measure(key, finding.signature, path, data.values.get("pid"),
                               rank=finding.rank, node=finding.node)

    def _process_cwd(self, finding: Finding) -> tuple[int, str] | None:
        """(pid, cwd) of the finding's rank's process as the probe read it: the job's working
        directory, which a relative path in that rank's logs is relative to."""
        p = self._rank_procs.get(finding.rank) if finding.rank is not None else None
        if p is None or not p.cwd or (finding.node and p.node and finding.node.split(".")[0] != p.node.split(".")[0]):
            return None
        return (p.pid, p.cwd)

    async def on_fix_ready(self, msg: FixReady) -> None:
        if self._exit or not self.is_running:  # a worker message arriving while the app tears down
            return
        if msg.key != self._fix_key:
            return
        inc = self.state.incident
        coll = None
        if inc is not None and inc.collectives and inc.initiating is not None and (
                inc.initiating.signature, inc.initiating.rank) == (msg.finding.signature, msg.finding.rank):
            coll = inc.collectives  # the hang's collective table goes with its initiating finding
        await self.query_one(FixPanel).show(msg.finding, msg.panel, msg.differential, msg.origin, coll)
