"""Secrets out of everything Denpex makes to be shared (evidence bundles, the copied summary).

A log line may hold a credential: a token printed by a login helper, an ``Authorization:``
header in a debug dump, a private key ``cat``-ed by a setup script. Wherever a bundle or a
copied summary carries log text, each secret is replaced by ``[redacted: KIND]`` and the rest of
the line is kept, so the line still says what happened; :class:`Redactor` counts what it
replaced, for the README of the bundle.

The rules are the regex plugins of ``detect-secrets`` (Yelp's well-kept rule set: AWS, GitHub,
GitLab, Slack, Stripe, JWT, private-key headers, PyPI, npm, OpenAI, SendGrid, Twilio, basic
auth in URLs, ...), plus what its 1.5 release lacks and training logs hold: Hugging Face tokens,
GitHub fine-grained tokens, ``Bearer`` tokens, the AWS secret key of an ``aws_secret_access_key=``
pair, ``KEY=value`` assignments whose key names a secret, and the whole body of a PEM private-key
block (the plugin only sees its first line). Its public-IP rule is left out: peer addresses are
diagnosis, not secrets. When ``detect-secrets`` cannot be imported the built-in rules still run
and :attr:`Redactor.ruleset` says so.

Lines are cut (4 KiB in bundles) before they get here, so the plugins' Python patterns run on
bounded text.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

__all__ = ["Redactor", "redact_text", "redactor"]

_OWN: list[tuple[str, str]] = [
    ("Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}"),
    ("GitHub token", r"\bgithub_pat_[A-Za-z0-9_]{22,}"),
    ("GitHub token", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36,}"),
    ("AWS Access Key", r"\b(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("AWS secret key", r"(?i)aws_?secret_?(?:access_?)?key[\"']?\s*[=:]\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"),
    ("bearer token", r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{12,}=*)"),
    ("secret assignment", r"(?i)(?:^|[^A-Za-z0-9])[A-Za-z0-9_.-]*(?:token|secret|passw(?:or)?d|api[_-]?key|access[_-]?key"
                          r"|private[_-]?key|credentials?)[\"']?\s*[=:]\s*[\"']?([^\s\"',;]{8,})"),
]
_SKIP_PLUGINS = {"ip_public"}
_PEM_BEGIN = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----")
_PEM_END = re.compile(r"-----END ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----")
_PEM_MAX_LINES = 200  # a BEGIN with no END: stop redacting the following lines after this many


def _plugin_rules() -> tuple[list[tuple[str, re.Pattern]], str]:
    try:
        import importlib
        import pkgutil

        import detect_secrets.plugins as plugins
        from detect_secrets.plugins.base import RegexBasedDetector
    except Exception as exc:  # noqa: BLE001 - not installed, or broken: the built-in rules still run
        return [], f"built-in rules only (detect-secrets unavailable: {type(exc).__name__})"
    rules: list[tuple[str, re.Pattern]] = []
    for m in pkgutil.iter_modules(plugins.__path__):
        if m.name in _SKIP_PLUGINS or m.name == "base":
            continue
        try:
            mod = importlib.import_module(f"{plugins.__name__}.{m.name}")
        except Exception:  # noqa: BLE001
            continue
        for cls in vars(mod).values():
            if isinstance(cls, type) and issubclass(cls, RegexBasedDetector) and cls is not RegexBasedDetector \
                    and cls.__module__ == mod.__name__:
                for rx in getattr(cls, "denylist", ()):
                    if isinstance(rx, re.Pattern):
                        rules.append((str(cls.secret_type), rx))
    try:
        from importlib.metadata import version

        v = version("detect-secrets")
    except Exception:  # noqa: BLE001
        v = "?"
    return rules, f"detect-secrets {v} plugins + Denpex's own rules"


class Redactor:
    """Replaces secrets in text, line by line, and counts what it replaced (kind -> count)."""

    def __init__(self) -> None:
        plugin, self.ruleset = _plugin_rules()
        self.rules: list[tuple[str, re.Pattern]] = [(k, re.compile(p)) for k, p in _OWN] + plugin
        self.counts: Counter[str] = Counter()

    def _line(self, line: str) -> str:
        for kind, rx in self.rules:
            if not rx.search(line):
                continue
            out, last = [], 0
            for m in rx.finditer(line):
                s, e = (m.span(1) if rx.groups and m.group(1) is not None else m.span())
                if e <= s or line[s:e].startswith("[redacted"):
                    continue
                out.append(line[last:s])
                out.append(f"[redacted: {kind}]")
                last = e
                self.counts[kind] += 1
            if out:
                line = "".join(out) + line[last:]
        return line

    def lines(self, lines: Iterable[str]) -> list[str]:
        """Each line redacted; the body of a PEM private-key block (BEGIN to END) as a whole."""
        out: list[str] = []
        in_pem = 0
        for line in lines:
            if in_pem:
                m = _PEM_END.search(line)
                cut = m.start() if m else len(line)
                out.append(_body(line, cut) + line[cut:])
                in_pem = 0 if m or in_pem >= _PEM_MAX_LINES else in_pem + 1
                continue
            b = _PEM_BEGIN.search(line)
            if b:
                end = _PEM_END.search(line, b.end())
                body = line[b.end(): end.start()] if end else line[b.end():]
                if body.strip():
                    self.counts["private key block"] += 1
                    line = line[: b.end()] + "[redacted: private key block]" + (line[end.start():] if end else "")
                elif not end:
                    self.counts["private key block"] += 1
                if not end:
                    in_pem = 1
                out.append(self._line(line[: b.start()]) + line[b.start():])
                continue
            out.append(self._line(line))
        return out

    def text(self, text: str) -> str:
        if not text:
            return text
        parts = text.split("\n")
        return "\n".join(self.lines(parts))

    def value(self, v):
        """Every string of a JSON-like value redacted (dict keys are kept)."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {k: self.value(x) for k, x in v.items()}
        return v

    def summary(self) -> str:
        if not self.counts:
            return "none found"
        return ", ".join(f"{n} {k}{'s' if n > 1 else ''}" for k, n in sorted(self.counts.items()))


_LOG_PREFIX = re.compile(r"^\s*(?:(?:\[[^\]]{1,40}\]:?|[\w.-]{1,40}:|>?\s*\d+:)\s*)*")


def _body(line: str, end: int) -> str:
    """A line inside a PEM private-key block, up to ``end``: its log prefix (``[rank3]: ``,
    an excerpt's line number) kept, the key material replaced."""
    pre = _LOG_PREFIX.match(line[:end]).group(0)
    return line[:end] if not line[len(pre):end].strip() else pre + "[redacted: private key block line]"


_SHARED: Redactor | None = None


def redactor() -> Redactor:
    """A fresh Redactor sharing the compiled rules (counts start at zero)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Redactor()
    r = Redactor.__new__(Redactor)
    r.ruleset, r.rules, r.counts = _SHARED.ruleset, _SHARED.rules, Counter()
    return r


def redact_text(text: str) -> str:
    return redactor().text(text)
