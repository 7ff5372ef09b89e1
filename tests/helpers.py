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


def psutil_create_time(pid: int) -> float:
    """psutil's create time of ``pid`` on Denpex's boot time. The kernel's btime (what both
    add to the ticks since boot) is now minus the uptime, cut to whole seconds: when the clock
    is slewed it flips by a second between two reads, and a fresh read (psutil 7 reads it each
    time; Denpex once) then differs by exactly 1.0 s, as a loaded CI run showed."""
    import psutil

    from denpex_tui.probes.processes import boot_time

    p = psutil.Process(pid)
    try:
        since_boot = p.create_time(monotonic=True)
    except TypeError:  # psutil < 7: no monotonic form
        since_boot = p.create_time() - psutil.boot_time()
    assert abs(boot_time() - psutil.boot_time()) <= 1.0
    return since_boot + boot_time()
