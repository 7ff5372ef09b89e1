"""Untrusted text made safe: the one door every string passes before it is shown or written.

Log lines, file and folder names, node and host names, process argv and environment,
signature-pack texts, warnings and error messages all reach a terminal, a JSON field or a
notification only through this module. There is one set of characters that is never passed
raw (:data:`UNSAFE`) and one function that escapes them (:func:`safe_str`);
:func:`safe_line` is the same door for a raw log line, keeping its SGR colours as spans.

* invalid UTF-8 in a log line becomes U+FFFD; a name decoded with ``surrogateescape`` (a file
  name that is not UTF-8) shows each undecodable byte as ``\\x9b``, so JSON stays valid UTF-8
  and a strict stdout never fails;
* SGR colour sequences (``ESC [ ... m``) in a log line are removed from the text and kept as
  style spans, so a coloured DeepSpeed ``[WARNING]`` still shows in colour; an SGR with an
  absurd parameter (4 400 digits) is not a colour and is shown escaped;
* every other escape sequence (CSI, OSC, DCS, SOS/PM/APC, two-byte ESC) and every character
  of :data:`UNSAFE` is shown escaped as visible text (``\\x1b[2J``, ``\\u202e``), never passed
  through;
* a trailing CR (CRLF files) is dropped; a CR inside a line (the overwrite trick) is escaped.

:data:`UNSAFE` is every character of the Unicode categories Cc (C0 and C1 controls, DEL; TAB
excepted), Cf (format: bidi overrides and isolates, U+061C, zero-width and direction marks
U+200B-U+200F, word joiners, BOM, tags), Zl/Zp (U+2028, U+2029) and Cs (surrogates).
``tests/test_text.py`` checks the table against ``unicodedata``.

We checked that Rich and Textual 8.2.8 both pass a log line's OSC 52 clipboard-write sequence
straight to the terminal, so nothing downstream may be trusted to do this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["SafeText", "UNSAFE", "safe_line", "safe_str", "safe_json", "has_control", "fs_str"]

# Unicode 14 (Python 3.11) Cc + Cf + Zl + Zp + Cs, TAB excepted.
UNSAFE = (
    "\x00-\x08\x0a-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
)
_UNSAFE = re.compile(f"[{UNSAFE}]")

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
# An SGR kept as a colour: at most 16 parameters of at most 3 digits (38;2;255;255;255 ...).
_SGR_OK = re.compile(r"(?:[0-9]{0,3}[;:]){0,15}[0-9]{0,3}")
_ASCII_SAFE = re.compile(rb"[^\x09\x20-\x7e]")


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): show the byte
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _escape_all(text: str) -> str:
    return _UNSAFE.sub(lambda m: _escape_char(m.group()), text)


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


def safe_str(text: object, limit: int | None = None) -> str:
    """Any value as display-safe text (no style kept): names, argv, warnings, JSON values.

    ``limit`` cuts the result to that many characters (ending in ``…``)."""
    s = text if isinstance(text, str) else str(text)
    if _UNSAFE.search(s):
        s = _escape_all(s)  # an SGR in a name is shown too (a log line's colours are safe_line's)
    if limit is not None and len(s) > limit:
        s = s[: max(0, limit - 1)] + "…"
    return s


def fs_str(name: str | bytes) -> str:
    """A file name (bytes, or str decoded with ``surrogateescape``) as display-safe text."""
    if isinstance(name, bytes):
        import os

        name = os.fsdecode(name)
    return safe_str(name)


def safe_json(obj: Any) -> Any:
    """A JSON-able value with every string (keys too) made safe: what any ``--json`` writes."""
    if isinstance(obj, str):
        return safe_str(obj)
    if isinstance(obj, dict):
        return {safe_str(k) if isinstance(k, str) else k: safe_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [safe_json(v) for v in obj]
    return obj


def has_control(text: str) -> bool:
    """True when ``text`` holds anything that :func:`safe_str` would escape."""
    return bool(_UNSAFE.search(text))


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
    if not _UNSAFE.search(text):
        return SafeText(text)
    # 8-bit CSI (U+009B) etc. are C1 controls: escaped by _escape_all, never interpreted.
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
            if params and not _SGR_OK.fullmatch(params):
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
