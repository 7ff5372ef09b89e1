"""Shared test helpers (tests/ is on sys.path: pytest's rootdir-relative import mode)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fixtures" / "corpus"


def line_chunks(data: bytes, size: int) -> list[bytes]:
    """``data`` cut into pieces of about ``size`` bytes, each ending with a whole line."""
    out, pos = [], 0
    while pos < len(data):
        end = data.find(b"\n", min(pos + size, len(data) - 1)) + 1 or len(data)
        out.append(data[pos:end])
        pos = end
    return out
