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


def readable(f, timeout: float) -> bool:
    """select() on one fd or file, without select()'s limit of fd 1024: a test process under
    load can hold more for a moment (CI: "filedescriptor out of range in select()")."""
    import select

    p = select.poll()
    p.register(f, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(p.poll(timeout * 1000))
