"""Untrusted log text made safe, once, at the door.

Every byte string that comes from a log goes through :func:`safe_line` before any other
part of Denpex sees it as text. The result can be printed to a terminal, put in JSON, shown
in the TUI or copied into a shell command (after quoting) without ever driving the terminal:

* invalid UTF-8 becomes U+FFFD;
* SGR colour sequences (``ESC [ ... m``) are removed from the text and kept as style spans,
  so a coloured DeepSpeed ``[WARNING]`` still shows in colour;
* every other escape sequence (CSI, OSC, DCS, SOS/PM/APC, two-byte ESC), every C0 control
  character except TAB, DEL, the C1 controls U+0080-U+009F and the Unicode bidi overrides
  (U+202A-U+202E, U+2066-U+2069) are shown escaped as visible text (``\\x1b[2J``), never
  passed through;
* a trailing CR (CRLF files) is dropped; a CR inside a line (the overwrite trick) is escaped.

We checked that Rich and Textual 8.2.8 both pass a log line's OSC 52 clipboard-write sequence
straight to the terminal, so nothing downstream may be trusted to do this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SafeText", "safe_line", "safe_str", "has_control"]

# One escape sequence, longest form first. OSC/DCS/SOS/PM/APC strings end at BEL or ST
# (ESC \\); an unterminated one runs to the end of the line (and is escaped whole).
_ESCAPE = re.compile(
    r"""
    \x1b\[ (?P<csi_params>[0-?]*) (?P<csi_inter>[ -/]*) (?P<csi_final>[@-~])   # CSI
  | \x1b[\]PX^_] [^\x07\x1b]* (?:\x07|\x1b\\|$)                                # OSC DCS SOS PM APC
  | \x1b[ -/]* [0-~]                                                            # other ESC Fe/Fp/nF
  | \x1b                                                                        # lone ESC
    """,
    re.VERBOSE,
)
# Characters that must never reach a terminal raw (after escape sequences were handled).
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufeff]")
_NEEDS_WORK = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufeff]")
_ASCII_SAFE = re.compile(rb"[^\x09\x20-\x7e]")


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def _escape_all(text: str) -> str:
    return _CONTROL.sub(lambda m: _escape_char(m.group()), text)


@dataclass(frozen=True, slots=True)
class SafeText:
    """Display-safe text plus the SGR style spans that were in the original line.

    ``spans`` holds ``(start, end, sgr)`` where ``sgr`` is the parameter string of the SGR
    sequence (``"93"``, ``"1;31"``); ``end`` is exclusive. ``text`` never contains a control
    character other than TAB.
    """

    text: str
    spans: tuple[tuple[int, int, str], ...] = ()

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.text


def safe_str(text: str) -> str:
    """Make an already-decoded string safe (no style kept). Used for paths, argv, JSON values."""
    if not _NEEDS_WORK.search(text) and "\x1b" not in text:
        return text
    return safe_line(text).text


def has_control(text: str) -> bool:
    """True when ``text`` holds anything that :func:`safe_str` would escape or drop."""
    return bool(_NEEDS_WORK.search(text)) or "\x1b" in text


def safe_line(raw: bytes | str) -> SafeText:
    """Turn one raw log line (without its newline) into :class:`SafeText`."""
    if isinstance(raw, bytes):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not _ASCII_SAFE.search(raw):
            return SafeText(raw.decode("ascii"))
        text = raw.decode("utf-8", errors="replace")
    else:
        text = raw[:-1] if raw.endswith("\r") else raw
        if "\x1b" not in text and not _NEEDS_WORK.search(text):
            return SafeText(text)
    # 8-bit CSI (U+009B) etc. are C1 controls: escaped by _CONTROL below, never interpreted.
    if "\x1b" not in text:
        return SafeText(_escape_all(text))

    out: list[str] = []
    spans: list[tuple[int, int, str]] = []
    open_style: tuple[int, str] | None = None
    length = 0
    pos = 0
    for m in _ESCAPE.finditer(text):
        if m.start() > pos:
            piece = _escape_all(text[pos : m.start()])
            out.append(piece)
            length += len(piece)
        pos = m.end()
        if m.group("csi_final") == "m" and not m.group("csi_inter"):
            params = m.group("csi_params")
            if params and not re.fullmatch(r"[0-9;:]*", params):
                piece = _escape_all(m.group())
                out.append(piece)
                length += len(piece)
                continue
            # SGR: close the running span, open a new one unless it is a reset.
            if open_style is not None and open_style[0] < length:
                spans.append((open_style[0], length, open_style[1]))
            open_style = None
            if params not in ("", "0", "00"):
                open_style = (length, params)
            continue
        piece = _escape_all(m.group())
        out.append(piece)
        length += len(piece)
    if pos < len(text):
        piece = _escape_all(text[pos:])
        out.append(piece)
        length += len(piece)
    if open_style is not None and open_style[0] < length:
        spans.append((open_style[0], length, open_style[1]))
    return SafeText("".join(out), tuple(spans))
