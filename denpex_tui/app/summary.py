"""``y``: the incident as plain text for a ticket: the story (root cause, restarts, the launcher's
other opinion), each failing rank's first error line with its file:line, the evidence, and the
verification commands exactly as the fix panel shows them. Secrets in the log text are
redacted (core/redact.py), as in evidence bundles, with a last line saying what was. No
Textual here."""

from __future__ import annotations

from denpex_tui.core.model import Finding
from denpex_tui.core.redact import redactor
from denpex_tui.core.story import Story
from denpex_tui.core.words import rank as rank_word

__all__ = ["incident_summary"]


def _line(f: Finding, role: str) -> str:
    who = rank_word(f.rank, "no rank")
    when = f" {f.time.isoformat(sep=' ', timespec='milliseconds')}" if f.time is not None else ""
    approx = " (approx.)" if f.time is not None and f.time_approx else ""
    return f"  {role:<10} {who}{when}{approx}  {f.path}:{f.text_line}\n      {f.text}"


def incident_summary(story: Story | None, commands: list | None = None) -> str:
    if story is None:
        return "denpex: no failure found in these logs (yet)."
    inc = story.root
    out = [f"denpex: {story.headline}"]
    out += [f"  {x}" for x in (story.beneath, story.launcher_note) if x]
    out.append("")
    out.append(f"Attempt {inc.attempt}, first error lines:")
    if inc.initiating is not None:
        out.append(_line(inc.initiating, "initiating"))
    for f in inc.same_cause:
        out.append(_line(f, "same cause"))
    seen = set()
    for f in inc.collateral:
        if (f.rank, f.signature) in seen:
            continue
        seen.add((f.rank, f.signature))
        out.append(_line(f, "collateral"))
    if len(story.attempts) > 1:
        out.append("")
        out.append("Attempts:")
        out += [f"  attempt {a.attempt}: {a.summary} (confidence {a.confidence})" for a in story.attempts]
    if inc.evidence:
        out.append("")
        out.append("Evidence:")
        out += [f"  - {e}" for e in inc.evidence]
    if commands:
        out.append("")
        out.append("Verify (run these yourself):")
        for c in commands:
            out.append(f"  # {c.title}")
            out.append(f"  $ {c.text}")
    red = redactor()
    text = red.text("\n".join(out))
    if red.counts:
        text += f"\n(redacted before copying: {red.summary()})"
    return text + "\n"
