"""Generic detectors beside the catalog: errno texts in every spelling, and fatal reports.

Every detector has one interface: ``literals`` (what the one prefilter pass looks for) and
``detect(text) -> (signature id, fields) | None`` on a prefix-stripped line. Fields are named
facts read from the line (``errno``, ``errname``, ``path``, ``signal``, ``exc_type``...): the fix
panel, the probes and the differential take them from the finding instead of parsing its text
again.

* :class:`ErrnoDetector` knows the kernel's strerror texts and numbers and every way runtimes
  print them: Python's ``[Errno 28] No space left on device: '/x'``, C/C++
  ``strerror: No space left on device``, ``... failed: No space left on device``, Rust's
  ``(os error 28)`` and ``Os { code: 28, ... }``, ``errno=28``, DeepSpeed aio's ``error = 28``,
  ``No space left on device (28)``. It maps each errno to the catalog's ``os.*`` id.
* :class:`FatalDetector` knows the reports of a crashing process: ``Fatal Python error``,
  glibc/abseil/UCX/faulthandler signal reports, C/C++ ``Assertion ... failed``,
  ``terminate called after throwing``, the shell's ``Segmentation fault (core dumped)``.
* :class:`ExceptionDetector` knows a Python exception line with or without its traceback header.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ERRNOS",
    "SIGNALS",
    "ErrnoDetector",
    "FatalDetector",
    "ExceptionDetector",
    "errno_info",
    "signal_name",
]


@dataclass(frozen=True)
class Errno:
    number: int
    name: str
    text: str  # glibc's strerror()
    sig_id: str
    alt: tuple[str, ...] = ()  # other spellings of the text (older libcs, other runtimes)
    weak: bool = False  # an everyday phrase: alone it needs the number, a path or a failed call


ERRNOS: tuple[Errno, ...] = (
    Errno(28, "ENOSPC", "No space left on device", "os.enospc"),
    Errno(122, "EDQUOT", "Disk quota exceeded", "os.edquot"),
    Errno(23, "ENFILE", "Too many open files in system", "os.enfile"),
    Errno(24, "EMFILE", "Too many open files", "os.emfile"),
    Errno(5, "EIO", "Input/output error", "os.eio"),
    Errno(74, "EBADMSG", "Bad message", "os.ebadmsg", weak=True),
    Errno(30, "EROFS", "Read-only file system", "os.erofs"),
    Errno(12, "ENOMEM", "Cannot allocate memory", "os.enomem"),
    Errno(2, "ENOENT", "No such file or directory", "os.enoent"),
    Errno(13, "EACCES", "Permission denied", "os.eacces", weak=True),
    Errno(1, "EPERM", "Operation not permitted", "os.eperm", weak=True),
    Errno(17, "EEXIST", "File exists", "os.eexist", weak=True),
    Errno(39, "ENOTEMPTY", "Directory not empty", "os.enotempty"),
    Errno(116, "ESTALE", "Stale file handle", "os.estale", ("Stale NFS file handle",)),
    Errno(27, "EFBIG", "File too large", "os.errno", weak=True),
    Errno(104, "ECONNRESET", "Connection reset by peer", "os.econnreset"),
    Errno(32, "EPIPE", "Broken pipe", "os.epipe", weak=True),
    Errno(111, "ECONNREFUSED", "Connection refused", "os.econnrefused", weak=True),
    Errno(110, "ETIMEDOUT", "Connection timed out", "os.etimedout", weak=True),
    Errno(98, "EADDRINUSE", "Address already in use", "os.eaddrinuse"),
    Errno(99, "EADDRNOTAVAIL", "Cannot assign requested address", "os.errno"),
    Errno(101, "ENETUNREACH", "Network is unreachable", "os.errno", weak=True),
    Errno(113, "EHOSTUNREACH", "No route to host", "os.errno", weak=True),
    Errno(107, "ENOTCONN", "Transport endpoint is not connected", "os.errno"),
    Errno(9, "EBADF", "Bad file descriptor", "os.errno", weak=True),
    Errno(18, "EXDEV", "Invalid cross-device link", "os.errno"),
    Errno(36, "ENAMETOOLONG", "File name too long", "os.errno"),
)
_BY_NUMBER = {e.number: e for e in ERRNOS}
# Longest text first: "Too many open files in system" before "Too many open files".
_BY_TEXT = sorted(((t, e) for e in ERRNOS for t in (e.text, *e.alt)), key=lambda te: -len(te[0]))

# Spellings that carry the number (the text may be missing, or in another language).
_NUMERIC = re.compile(
    r"\[Errno (?P<a>\d{1,4})\]"
    r"|\(os error (?P<b>\d{1,4})\)"
    r"|\bOs \{ code: (?P<c>\d{1,4}),"
    r"|\berrno(?: is|:| =|=| ) ?(?P<d>\d{1,4})\b"
    r"|\bfailed on \S+ error = (?P<e>\d{1,4})\b"
)
# The name runs to the line's last quote when it ends the line (a name may hold the quote).
_QUOTED_TO_END = re.compile(r"""[:,]? ?(?:'(?P<q1>[^\n]{1,4096})'|"(?P<q2>[^\n]{1,4096})")\s*$""")
_QUOTED_AFTER = re.compile(r"""[:,]? ?(?:'(?P<q1>[^']{1,4096})'|"(?P<q2>[^"]{1,4096})")""")
_AIO_FILE = re.compile(r"\bfailed on (?P<p>\S{1,4096}) error = ")
_ABS_PATH = re.compile(r"""(?<![\w.:/<])(?P<p>/(?:[\w.@%+=,~-]{1,255}/?){1,64})""")
# A failed call right before the text: "open: ", "failed: ", "error: ", "write failed "...
_FAILED_CALL = re.compile(r"(?:\w\)?: |\bfail(?:ed|ure)\b.{0,40}|\berror\b.{0,20})$")
_SRC_FILE = re.compile(r"\.(?:py|cc|cpp|cu|h|hpp|c)(?::\d+)?$")


def errno_info(number: int | None = None, name: str | None = None) -> Errno | None:
    if number is not None:
        return _BY_NUMBER.get(number)
    if name is not None:
        return next((e for e in ERRNOS if e.name == name), None)
    return None


def _path_near(text: str, end: int) -> str | None:
    """The path a failed call names: Python's quoted filename right after the strerror text,
    DeepSpeed aio's ``failed on FILE``, else the first absolute path in the line that is not a
    source file of a stack frame."""
    m = _QUOTED_TO_END.match(text, end) if end >= 0 else None
    if m is None and end >= 0:
        m = _QUOTED_AFTER.match(text, end)
    if m:
        return m.group("q1") or m.group("q2")
    if end >= 0 and text[end : end + 3] in (": '", ': "'):
        return None  # a quoted name cut short (by a newline in it): never guess a shorter path
    m = _AIO_FILE.search(text)
    if m:
        return m.group("p")
    for m in _ABS_PATH.finditer(text):
        p = m.group("p").rstrip(".,;:")
        if len(p) > 1 and not _SRC_FILE.search(p):
            return p
    return None


class ErrnoDetector:
    literals: tuple[tuple[str, bool], ...] = tuple(
        [(t, False) for t, _ in _BY_TEXT] + [("[Errno ", False), ("os error ", False), ("Os { code: ", False), ("errno", True), (" error = ", False)]
    )

    def detect(self, text: str) -> tuple[str, dict[str, Any]] | None:
        found: Errno | None = None
        end = -1
        for t, e in _BY_TEXT:
            i = text.find(t)
            if i >= 0:
                found, end = e, i + len(t)
                break
        num = None
        m = _NUMERIC.search(text)
        if m:
            g = next(x for x in m.groups() if x is not None)
            num = int(g)
        if found is None and num is not None:
            found = _BY_NUMBER.get(num)
            if found is None:
                return None
        if found is None:
            return None
        path = _path_near(text, end)
        if found.weak and num is None and path is None and not _FAILED_CALL.search(text, 0, max(0, end - len(found.text))):
            return None  # "Permission denied, please try again." is ssh talking, not a failed call
        fields: dict[str, Any] = {"errno": found.number, "errname": found.name}
        if path:
            fields["path"] = path
        return found.sig_id, fields


# --- fatal reports ----------------------------------------------------------------------

SIGNALS = {
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
    8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
    14: "SIGALRM", 15: "SIGTERM",
}
_BY_DESC = {
    "segmentation fault": "SIGSEGV",
    "bus error": "SIGBUS",
    "aborted": "SIGABRT",
    "abort": "SIGABRT",
    "floating point exception": "SIGFPE",
    "floating-point exception": "SIGFPE",
    "illegal instruction": "SIGILL",
    "killed": "SIGKILL",
}


def signal_name(n: int | str | None) -> str | None:
    if n is None:
        return None
    if isinstance(n, str):
        s = n.strip()
        if s.upper().startswith("SIG"):
            return s.upper().split()[0].rstrip(")")
        return _BY_DESC.get(s.lower())
    return SIGNALS.get(abs(n))


_FATAL: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"Fatal Python error: (?P<desc>Segmentation fault|Bus error|Aborted|Floating[ -]point exception|Illegal instruction)"), "proc.fatal-signal", "faulthandler"),
    (re.compile(r"\bCaught signal (?P<n>\d{1,2}) \((?P<desc>[A-Za-z -]+)"), "proc.fatal-signal", "ucx"),
    (re.compile(r"\*\*\* (?P<name>SIG[A-Z]{2,6}) \(@[0-9a-fx]+\) received by PID (?P<pid>\d{1,7})"), "proc.fatal-signal", "glog"),
    (re.compile(r"\*\*\* Process received signal (?:(?P<name>SIG[A-Z]{2,6})|(?P<n>\d{1,2})) \*\*\*"), "proc.fatal-signal", "openmpi"),
    (re.compile(r"^Signal: (?P<desc>Segmentation fault|Bus error|Aborted|Floating point exception) \((?P<n>\d{1,2})\)"), "proc.fatal-signal", "openmpi"),
    (re.compile(r"\bSIG(?P<sname>SEGV|BUS|ABRT|FPE|ILL) received\b"), "proc.fatal-signal", "runtime"),
    # gdb: 'Thread 787 "imagenet_fake_d" received signal SIGBUS, Bus error.', 'Program received signal SIGSEGV, ...'
    (re.compile(r"\breceived signal (?P<name>SIG(?:SEGV|BUS|ABRT|FPE|ILL)), [A-Z]"), "proc.fatal-signal", "gdb"),
    (re.compile(r"^(?:/\S+: line \d+: +\d+ )?(?P<desc>Segmentation fault|Bus error|Aborted|Floating point exception|Illegal instruction) +\(core dumped\)"), "proc.fatal-signal", "shell"),
    # The shell's job report: bash "Killed" (alone, or glued to the progress bar the process left
    # behind), "bash: 15391 Killed    cmd", "/bin/sh: line 1: 15391 Killed ...", zsh "zsh: killed  cmd".
    (re.compile(r"^(?P<desc>Killed)\s*$|^\S*\b(?:ba|z|k|da)?sh(?:: line \d{1,7})?: +(?:\d{1,9} +)?(?P<desc2>[Kk]illed) "
                r"|(?:\]|\||%)\s?(?P<desc3>Killed)\s*$"
                # job-control reports: bash "[1]+  Killed   cmd", zsh "[1]  + killed   cmd" / "[1]    26478 killed   cmd"
                r"|(?:^|\]|\||%)\s?\[\d{1,4}\] *[+-]? +(?:\d{1,9} +)?(?P<desc4>[Kk]illed) "), "proc.killed", "shell"),
    (re.compile(r"^\S*\b(?:ba|z|k|da)?sh(?:: line \d{1,7})?: +(?:\d{1,9} +)?(?P<desc>[Ss]egmentation fault|[Aa]borted|"
                r"[Bb]us error|[Ff]loating point exception|[Ii]llegal instruction)"), "proc.fatal-signal", "shell"),
    # Ray: the raylet (or a re-raised ActorDiedError) saw a worker process end without an error of
    # its own: its connection closed (EOF). Killed (Ray lists SIGKILL by the OOM killer first) or crashed.
    (re.compile(r"Worker unexpectedly exits with a connection error code 2\b"), "proc.killed", "ray"),
    (re.compile(r"\bterminate called after throwing an instance of '(?P<exc_type>[^']{1,200})'"), "proc.assert-failed", "libstdc++"),
    (re.compile(r"\bterminate called (?:recursively|without an active exception)"), "proc.assert-failed", "libstdc++"),
    (re.compile(r"Assertion [`'](?P<expr>.{1,400}?)' failed\.?"), "proc.assert-failed", "assert"),
)
_FATAL_LITERALS = (
    ("Fatal Python error: ", False),
    ("Caught signal ", False),
    (") received by PID ", False),
    ("Process received signal", False),
    ("Signal: ", False),
    (" received", False),
    ("(core dumped)", False),
    ("terminate called ", False),
    ("connection error code 2", False),
    ("' failed", False),
    ("killed", True),  # "Killed", zsh's "killed"
    ("sh: ", False),
)


class FatalDetector:
    literals = _FATAL_LITERALS

    def detect(self, text: str) -> tuple[str, dict[str, Any]] | None:
        for rx, sid, via in _FATAL:
            m = rx.search(text)
            if not m:
                continue
            d = {k.rstrip("234"): v for k, v in m.groupdict().items() if v is not None}
            fields: dict[str, Any] = {"reported_by": via}
            sig = None
            if "name" in d:
                sig = d["name"]
            elif "sname" in d:
                sig = "SIG" + d["sname"]
            elif "n" in d:
                sig = SIGNALS.get(int(d["n"]))
            if sig is None and "desc" in d:
                sig = _BY_DESC.get(d["desc"].strip().lower().split(":")[0])
            if sid == "proc.assert-failed" and sig is None:
                sig = "SIGABRT"
            if sig:
                fields["signal"] = sig
            if "pid" in d:
                fields["pid"] = int(d["pid"])
            if "exc_type" in d:
                fields["exc_type"] = d["exc_type"]
            if "expr" in d:
                fields["assertion"] = d["expr"]
            return sid, fields
        return None


# --- exception lines --------------------------------------------------------------------

_EXC = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w{0,80}\.){0,8}[A-Z]\w{0,80}?(?:Error|Exception|Interrupt|SystemExit|Failure|Fault))"
    r"(?::(?: (?P<msg>.*))?)?\s*$"
)
_EXC_LITERALS = (("Error", False), ("Exception", False), ("Interrupt", False), ("SystemExit", False), ("Failure", False),
                 ("Fault", False))


class ExceptionDetector:
    """A Python exception line (``KeyError: 'x'``, ``torch.OutOfMemoryError: ...``) even when
    its ``Traceback (most recent call last):`` header is outside the excerpt."""

    literals = _EXC_LITERALS

    def detect(self, text: str) -> tuple[str, dict[str, Any]] | None:
        s = text.strip()
        if len(s) > 20000:
            s = s[:20000]
        m = _EXC.match(s)
        if not m:
            return None
        return "python.uncaught-exception", {"exc_type": m.group("type")}
