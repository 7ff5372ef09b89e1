"""Documents from outside (an evidence bundle's JSON, a signature pack's TOML, a trainer's state
file) are untrusted: their size and nesting are bounded *before* a parser sees them.

Python's parsers recurse (a ``[[[[...`` 100 000 deep is a RecursionError, an internal error
in whatever command read it) and build every value (a 97 KB ``.tar.gz`` holding 100 MB of
``[0,0,...]`` was 512 MB of list). So:

* :func:`read_capped` reads at most ``max_bytes`` (in chunks, from a file or a tar member) and
  refuses more;
* :func:`load_json` counts the values and measures the depth on the bytes, with the strings
  blanked out (C-speed regex passes, no Python loop per character), then parses;
* :func:`check_toml` does the same for TOML (its strings, literal strings, multi-line strings
  and comments blanked), for arrays and inline tables.

Every refusal is :class:`UntrustedError`, a ``ValueError`` with a one-line message.
"""

from __future__ import annotations

import json
import re
from typing import IO, Any

__all__ = ["UntrustedError", "read_capped", "load_json", "check_toml", "MAX_DEPTH"]

MAX_DEPTH = 64
MAX_VALUES = 4_000_000


class UntrustedError(ValueError):
    pass


def read_capped(fh: IO[bytes], max_bytes: int, what: str) -> bytearray:
    """All of ``fh`` when it holds at most ``max_bytes``; refused otherwise, having read at most
    ``max_bytes + 1`` (a decompression bomb is never inflated past the cap)."""
    buf = bytearray()
    while len(buf) <= max_bytes:
        chunk = fh.read(min(1 << 20, max_bytes + 1 - len(buf)))
        if not chunk:
            return buf  # not copied: the parsers take a bytearray
        buf += chunk
    raise UntrustedError(f"{what}: larger than {_size(max_bytes)}: not read")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


_JSON_STR = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_PAIR = re.compile(rb"\[\]|\{\}")


def _depth_ok(brackets: bytes, max_depth: int) -> bool:
    """Whether the bracket string nests at most ``max_depth`` deep (each pass removes the
    innermost pairs; unbalanced input is left for the parser to refuse)."""
    for _ in range(max_depth):
        nxt = _PAIR.sub(b"", brackets)
        if nxt == brackets:
            return True
        brackets = nxt
    return not brackets or _PAIR.sub(b"", brackets) == brackets


def load_json(data: bytes | bytearray, what: str, *, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES) -> Any:
    """``json.loads(data)`` once its depth and value count are known to be bounded."""
    blank = _JSON_STR.sub(b'""', data)
    values = blank.count(b",") + blank.count(b":")
    if values > max_values:
        raise UntrustedError(f"{what}: more than {max_values:,} values: not read")
    if not _depth_ok(_NOT_BRACKET.sub(b"", blank), max_depth):
        raise UntrustedError(f"{what}: nested deeper than {max_depth} levels: not read")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise UntrustedError(f"{what}: not valid JSON ({str(exc)[:120]})") from None


# TOML: multi-line strings first, then one-line ones, then comments (a '#' in a string is text).
_TOML_BLANK = re.compile(r'"""(?:[^"\\]|\\.|"(?!""))*"""|\'\'\'(?:[^\']|\'(?!\'\'))*\'\'\''
                         r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\n]*\'|#[^\n]*', re.S)
_TOML_HEADER = re.compile(r"^[ \t]*\[\[?[^\]\n]*\]\]?", re.M)
_NOT_BRACKET_S = re.compile(r"[^\[\]{}]+")


def check_toml(text: str, what: str, *, max_depth: int = MAX_DEPTH) -> None:
    """Refuse TOML whose arrays / inline tables nest deeper than ``max_depth``."""
    blank = _TOML_BLANK.sub('""', text)
    blank = _TOML_HEADER.sub("", blank)  # [table] and [[array.of.tables]] headers are no nesting
    brackets = _NOT_BRACKET_S.sub("", blank).encode()
    if not _depth_ok(brackets, max_depth):
        raise UntrustedError(f"{what}: arrays nested deeper than {max_depth} levels")
