"""Verification commands: templates filled from an incident, safe to paste into a shell.

A value that came from a log is untrusted. Before it is placed in a command:

1. it is refused when it holds any control character (ESC, CR/LF, C1, bidi overrides…):
   ``shlex.quote`` keeps those inside its quotes, and a pasted ESC or a bracketed-paste end
   (``ESC [201~``) would still act on the terminal;
2. numeric placeholders (``pid``, ``rank``, ``line``, ``world_size``) must be digits, ``node`` a
   host name, ``signature`` a signature id, ``params`` a count (``7e9``, ``7B``);
3. a path that starts with ``-`` gets a ``./`` so no command reads it as an option;
4. it is shell-quoted as exactly one word (``shlex.quote``).

A refused or missing value leaves ``<name>`` in the command and marks it incomplete, so the
user sees what to fill in instead of a command that silently does something else.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from .text import has_control

__all__ = ["PLACEHOLDERS", "TemplateError", "parse_template", "RenderedCommand", "render_command",
           "check_host", "render_probe_command", "deleted_open_command", "DELETED_OPEN_TEMPLATE"]

# lsof +L1 lists deleted-but-open files (link count < 1) of the whole system: "lsof +L1 -- DIR"
# lists only files open *as* DIR, so the deleted files under a path are found by their name.
DELETED_OPEN_TEMPLATE = "lsof -nP +L1 2>/dev/null | grep -F -- {dir}"

PLACEHOLDERS = ("path", "dir", "pid", "rank", "node", "log", "nvme_path", "ckpt_dir", "line",
                "job", "rerun", "ds_config", "signature", "params", "world_size", "socket")
_NUMERIC = {"pid", "rank", "line", "world_size"}
_PATHLIKE = {"path", "dir", "log", "nvme_path", "ckpt_dir", "job", "rerun", "ds_config", "socket"}
_SIGNATURE = re.compile(r"^[a-z0-9]+(?:\.[a-z0-9]+(?:-[a-z0-9]+)*)+$")
_COUNT = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:e[0-9]+|[kmbt])?$", re.I)
_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
# What text.safe_line leaves where a control character was: such a value is not the real
# path any more (and \ufffd means the bytes were not UTF-8): refuse rather than mislead.
_ESCAPED = re.compile(r"\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|\ufffd")


class TemplateError(ValueError):
    pass


def parse_template(template: str) -> list[tuple[str, str]]:
    """Split a template into ``("text", s)`` and ``("ph", name)`` parts."""
    if has_control(template):
        raise TemplateError("contains a control character")
    parts: list[tuple[str, str]] = []
    pos = 0
    for m in _TOKEN.finditer(template):
        if m.start() > pos:
            parts.append(("text", template[pos : m.start()]))
        tok = m.group()
        if tok == "{{":
            parts.append(("text", "{"))
        elif tok == "}}":
            parts.append(("text", "}"))
        elif m.group(1):
            name = m.group(1)
            if name not in PLACEHOLDERS:
                raise TemplateError(f"unknown placeholder {{{name}}} (known: {', '.join(PLACEHOLDERS)})")
            parts.append(("ph", name))
        else:
            raise TemplateError(f"stray '{tok}' at column {m.start() + 1} (write '{tok}{tok}' for a literal)")
        pos = m.end()
    if pos < len(template):
        parts.append(("text", template[pos:]))
    return parts


@dataclass(frozen=True)
class RenderedCommand:
    title: str
    text: str
    complete: bool
    missing: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    builtin: bool = True
    pack: str = "built-in"

    def to_json(self) -> dict:
        return {
            "title": self.title,
            "command": self.text,
            "complete": self.complete,
            "missing": list(self.missing),
            "refused": list(self.refused),
            "builtin": self.builtin,
            "pack": self.pack,
        }


def _check_value(name: str, value: object) -> str | None:
    """The value as a shell word, or None when it must be refused."""
    s = str(value)
    if not s or has_control(s) or _ESCAPED.search(s):
        return None
    if name in _NUMERIC:
        return s if s.isdigit() else None
    if name == "node":
        return s if _HOST.match(s) else None
    if name == "signature":
        return s if _SIGNATURE.match(s) else None
    if name == "params":
        return s if _COUNT.match(s) else None
    if name in _PATHLIKE and s.startswith("-"):
        s = "./" + s
    return shlex.quote(s)


def render_command(
    title: str,
    template: str,
    values: dict[str, object],
    *,
    builtin: bool = True,
    pack: str = "built-in",
) -> RenderedCommand:
    parts = parse_template(template)
    out: list[str] = []
    missing: list[str] = []
    refused: list[str] = []
    for kind, s in parts:
        if kind == "text":
            out.append(s)
            continue
        v = values.get(s)
        if v is None or v == "":
            missing.append(s)
            out.append(f"<{s}>")
            continue
        word = _check_value(s, v)
        if word is None:
            refused.append(s)
            out.append(f"<{s}>")
            continue
        out.append(word)
    return RenderedCommand(
        title=title,
        text="".join(out),
        complete=not missing and not refused,
        missing=tuple(dict.fromkeys(missing)),
        refused=tuple(dict.fromkeys(refused)),
        builtin=builtin,
        pack=pack,
    )


# -- probe transports (denpex probe/watch --hosts, --slurm-job, --probe-cmd) -------------------


def check_host(host: str) -> str:
    """A node, host alias or pod name as given: one word that no ssh, srun or kubectl can read
    as an option (no leading ``-``), no control character, no shell syntax."""
    s = str(host)
    if has_control(s) or not _HOST.fullmatch(s) or s.endswith("."):
        raise TemplateError(f"not a host name: {safe_repr(s)}")
    return s


def safe_repr(s: str, limit: int = 60) -> str:
    from .text import safe_str

    return repr(safe_str(s)[:limit])


def render_probe_command(template: str, host: str) -> str:
    """The shell command that starts ``denpex probe --stream --json`` on ``host``: ``{host}``
    replaced by the host name, checked and shell-quoted as one word; ``{{``/``}}`` are literal
    braces; any other placeholder is refused. The template is the user's own shell command (it
    runs with ``sh -c``, like any command they type); only the substituted value is untrusted.
    A valid host name is made of characters the shell never interprets, so its quoted form is
    itself and stays one word even inside the template's own quotes."""
    if has_control(template):
        raise TemplateError("--probe-cmd contains a control character")
    word = shlex.quote(check_host(host))
    out: list[str] = []
    pos = 0
    seen = False
    for m in _TOKEN.finditer(template):
        out.append(template[pos:m.start()])
        tok = m.group()
        if tok in ("{{", "}}"):
            out.append(tok[0])
        elif m.group(1) == "host":
            out.append(word)
            seen = True
        elif m.group(1):
            raise TemplateError(f"--probe-cmd: unknown placeholder {{{m.group(1)}}} (only {{host}})")
        else:
            raise TemplateError(f"--probe-cmd: stray '{tok}' at column {m.start() + 1} "
                                f"(write '{tok}{tok}' for a literal)")
        pos = m.end()
    out.append(template[pos:])
    if not seen:
        raise TemplateError("--probe-cmd needs {host} where the node's name goes")
    cmd = "".join(out)
    try:
        shlex.split(cmd)
    except ValueError as e:
        raise TemplateError(f"--probe-cmd: {e}")
    return cmd


def deleted_open_command(directory: str) -> RenderedCommand:
    """Deleted-but-open files under ``directory`` (lsof +L1 filtered to the path)."""
    title = "Deleted files still held open under the path (their blocks are not freed)"
    d = directory.rstrip("/")
    if not d:
        return render_command(title, "lsof -nP +L1", {})
    return render_command(title, DELETED_OPEN_TEMPLATE, {"dir": d})
