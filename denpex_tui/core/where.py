"""Where a failure happened: the phase of the job and the place it names, from the frames around it.

An errno says *what* failed (``[Errno 24] Too many open files``, ``[Errno 28] No space left on
device``), not *where*: the same EMFILE comes from a checkpoint writer that leaks fds and from a
DataLoader passing tensors by fd; the same ENOSPC from a full checkpoint disk and from a full
``/dev/shm`` (a POSIX semaphore, a shared tensor, NCCL's shared-memory segments). The frames say
where: a Python traceback's ``File ...`` lines and source lines, the lines of a native backtrace
after a fatal report (UCX's ``==== backtrace``, gdb's ``#0 ... in ncclShmOpen``, faulthandler's
stack), and the failing line's own text.

:data:`PLACES` is a registry of such shapes, each a small data entry (a regex over one frame or
line, the phase or the place it means, real example lines that run as tests in
``tests/test_where.py``, and where the meaning comes from). The pipeline records the entries a
finding's frames match (``fields["where"]``, innermost frame first: :class:`WhereMixin` for
native backtraces, :mod:`.tracebacks` for Python ones); :func:`refine` then says what and where:

* the phase label is the innermost frame's phase when the frames give one (an EMFILE in a
  DataLoader worker is "data loading", not the checkpoint save the errno's catalog entry assumes);
* an ENOSPC whose frames or text are on ``/dev/shm`` is ``os.shm-enospc``;
* a SIGBUS inside NCCL (its shared-memory setup, or any NCCL frame: NCCL maps its SHM transport
  and proxy segments from ``/dev/shm``, and a page ``/dev/shm`` cannot back faults with SIGBUS) is
  ``nccl.shm-attach-failed``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Place", "PLACES", "where_hits", "refine", "WhereMixin", "WINDOW_LINES"]

WINDOW_LINES = 40  # lines after a fatal report read as its backtrace
_MAX_HITS = 16


@dataclass(frozen=True)
class Place:
    name: str
    rx: re.Pattern[str]
    phase: str | None  # a catalog phase, or None
    place: str | None  # "/dev/shm" | "nccl" (inside NCCL) | None
    examples: tuple[str, ...]
    source: str


PLACES: tuple[Place, ...] = (
    Place("posix-semaphore",
          re.compile(r"_multiprocessing\.SemLock|multiprocessing/synchronize\.py|joblib/_multiprocessing_helpers\.py"
                     r"|\bsem_open\b"),
          None, "/dev/shm",
          ('    sl = self._semlock = _multiprocessing.SemLock(',
           '/root/miniconda3/envs/vits/lib/python3.8/site-packages/joblib/_multiprocessing_helpers.py:46: UserWarning: '
           '[Errno 28] No space left on device.  joblib will operate in serial mode'),
          "CPython multiprocessing/synchronize.py: a SemLock is a POSIX named semaphore (sem_open), a file in "
          "/dev/shm; joblib's helper probes one with mp.Semaphore() and warns with the OSError"),
    Place("torch-shared-tensor",
          re.compile(r"_share_(?:filename|fd)_cpu_|storage\._share_|</torch_\d+"),
          None, "/dev/shm",
          ('    fd, size = storage._share_fd_cpu_()',
           'RuntimeError: unable to write to file </torch_739_144252761_4>: No space left on device (28)'),
          "torch/multiprocessing/reductions.py: shared CPU tensors are files in /dev/shm (torch_<pid>_...)"),
    Place("nccl-shm",
          re.compile(r"\bncclShmOpen\b|shmutils|/dev/shm/nccl|\bnccl-shm-"),
          "startup", "/dev/shm",
          ('0x00007f6b59544f3b in ncclShmOpen(char*, unsigned long, void**, void**, int, void**) () from '
           '/usr/local/lib/python3.10/dist-packages/jaxlib/xla_extension.so',),
          "NCCL src/misc/shmutils.cc (ncclShmOpen): SHM transport and proxy segments under /dev/shm"),
    Place("nccl-frame",
          re.compile(r"\bnccl[A-Z]\w*\(|libnccl\.so"),
          None, "nccl",
          (' 4 0x0000000000059e97 ncclGetUniqueId()  ???:0',),
          "a native frame of NCCL (its functions are ncclXxx; libnccl.so)"),
    Place("dataloader",
          re.compile(r"torch/utils/data/|\bin _worker_loop\b|in DataLoader worker process|DataLoader worker \(pid"
                     r"|multiprocessing/queues\.py\", line \d+, in _feed|multiprocessing/resource_sharer\.py"
                     r"|reductions\.py\", line \d+, in (?:reduce|rebuild)_storage"),
          "data-loading", None,
          ('  File "/home/user1/miniconda3/lib/python3.7/multiprocessing/resource_sharer.py", line 149, in _serve',
           '  File "/miniconda/lib/python3.7/multiprocessing/queues.py", line 236, in _feed',
           'OSError: Caught OSError in DataLoader worker process 0.'),
          "torch.utils.data's DataLoader: workers, the queue feeder thread and fd passing of shared tensors"),
    Place("checkpoint-save",
          re.compile(r"torch/serialization\.py\", line \d+, in _?save\b|safetensors/torch\.py\", line \d+, in save"
                     r"|\bin (?:_save_checkpoint|save_checkpoint|save_pretrained|save_model|save_state)\b"
                     r"|torch/distributed/checkpoint/|checkpoint_engine"),
          "checkpoint-save", None,
          ('  File "/opt/venvs/torch/lib/python3.11/site-packages/torch/serialization.py", line 967, in save',
           '  File "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", line 3200, in _save_checkpoint'),
          "torch.save, safetensors, DCP, DeepSpeed checkpoint engines, HF Trainer's checkpoint saves"),
    Place("process-group-init",
          re.compile(r"\bin init_process_group\b|\bin _create_c10d_store\b|rendezvous\.py\"|\bin set_device\b"),
          "startup", None,
          ('  File "/home/wupeng/anaconda3/envs/ldm/lib/python3.8/site-packages/torch/distributed/distributed_c10d.py", '
           'line 595, in init_process_group',),
          "torch.distributed's init_process_group and rendezvous; torch.cuda.set_device at start"),
)


def where_hits(line: str) -> list[str]:
    """The names of the :data:`PLACES` entries one frame or line matches."""
    return [p.name for p in PLACES if p.rx.search(line)]


_BY_NAME = {p.name: p for p in PLACES}


def _add(hits: list[str], names: list[str]) -> None:
    for n in names:
        if n not in hits and len(hits) < _MAX_HITS:
            hits.append(n)


# A path that is a checkpoint (the file an errno names): the save's own evidence.
_CKPT_PATH = re.compile(r"(?i)checkpoint|ckpt|\.(?:safetensors|distcp)$|global_step\d|_states\.pt")
# errnos of a failed write: only they make a checkpoint path a checkpoint *save*
_WRITE_ERRNOS = frozenset({"ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EMFILE", "ENOTEMPTY", "EEXIST", "EIO",
                           "ESTALE", "EFBIG"})


def refine(f, catalog) -> tuple[str | None, str | None, str | None]:
    """(signature, phase, evidence) the frames around finding ``f`` support, each None when they
    change nothing. ``f.fields["where"]`` holds the entries its frames matched, innermost first;
    its own text and the path its errno names are read too. A generic errno signature's catalog
    phase (ENOSPC and EMFILE are filed under checkpoint save) is a guess: without frames or a path
    that say so, no phase is claimed."""
    hits = list(f.fields.get("where") or [])
    _add(hits, where_hits(f.text))
    path = str(f.fields.get("path") or "")
    if path.startswith("/dev/shm/"):
        _add(hits, ["posix-semaphore" if "/sem." in path else "torch-shared-tensor"])
    places = [(_BY_NAME[h].place) for h in hits if h in _BY_NAME and _BY_NAME[h].place]
    phase = next((_BY_NAME[h].phase for h in hits if h in _BY_NAME and _BY_NAME[h].phase), None)
    if phase is None and path and _CKPT_PATH.search(path) and str(f.fields.get("errname") or "") in _WRITE_ERRNOS:
        phase = "checkpoint-save"
    elif phase is None and f.family == "os" and f.phase != "any" and not places:
        return None, "any", None
    sig, why = None, None
    errname = str(f.fields.get("errname") or "")
    signal = str(f.fields.get("signal") or "")
    if "/dev/shm" in places and (f.signature == "os.enospc" or errname == "ENOSPC"):
        sig = "os.shm-enospc"
        why = "the ENOSPC is on /dev/shm: it came from " + _why(hits, "/dev/shm")
    elif f.signature == "proc.fatal-signal" and signal == "SIGBUS" and ("/dev/shm" in places or "nccl" in places):
        sig = "nccl.shm-attach-failed"
        why = ("a bus error inside NCCL (" + _why(hits, "/dev/shm", "nccl") + "): NCCL maps its shared-memory "
               "segments from /dev/shm, and a page /dev/shm cannot back faults with SIGBUS")
    if sig is not None and catalog.get(sig) is None:
        sig = None
    if sig is not None and phase is None:
        phase = "any"  # the refined signature's catalog phase is no evidence either
    if phase is not None and phase == f.phase:
        phase = None
    where = next((h for h in hits if h in _BY_NAME and _BY_NAME[h].phase == phase), None)
    if phase not in (None, "any"):
        said = (f"its frames are in {where.replace('-', ' ')} code" if where else f"it names the checkpoint file {path}")
        why = (why + "; " if why else "") + f"{said} ({phase.replace('-', ' ')})"
    return sig, phase, why


def _why(hits: list[str], *places: str) -> str:
    names = [h for h in hits if h in _BY_NAME and _BY_NAME[h].place in places]
    return ", ".join(n.replace("-", " ") for n in names) or "its frames"


# -- native backtraces after a fatal report ---------------------------------------------------

_WINDOW_SIGS = frozenset({"proc.fatal-signal", "proc.assert-failed", "nccl.system-error"})


class _Window:
    __slots__ = ("finding", "left")

    def __init__(self, finding, left: int) -> None:
        self.finding = finding
        self.left = left


_FRAME_B = re.compile(rb'File "[^"]*", line \d+, in ')
_BACK_LINES = 40
_BACK_BYTES = 16 << 10


def frames_before(data: bytes, at: int) -> list[str]:
    """Entries of the frame lines right above an exception line at ``at`` in ``data`` (an excerpt
    that lost its ``Traceback`` header keeps its frames), innermost first; bounded."""
    from .lines.facts import line_facts

    out: list[str] = []
    end = at - 1
    lo = max(0, at - _BACK_BYTES)
    misses = 0
    pending: bytes | None = None  # a line that is no frame: a frame's source line if one is above it
    for _ in range(_BACK_LINES):
        if end <= lo:
            break
        start = data.rfind(b"\n", lo, end) + 1
        raw = data[start:end]
        end = start - 1
        if _FRAME_B.search(raw):
            misses = 0
            for line in (pending, raw):
                if line is not None:
                    _add(out, where_hits(line_facts(line).text))
            pending = None
        else:
            misses += 1  # a frame's source line; two in a row end the frames
            if misses > 1 or not raw.strip():
                break
            pending = raw
    return out


class WhereMixin:
    """Reads the :data:`WINDOW_LINES` lines of a stream that follow a fatal report (its native
    backtrace) for :data:`PLACES`, into the report's ``fields["where"]``; and the frame lines just
    above an exception line found outside a traceback block (:func:`frames_before`)."""

    def open_where_window(self, f, key) -> None:
        if f.signature in _WINDOW_SIGS and f.traceback_start is None:
            self.windows[key] = _Window(f, WINDOW_LINES)

    def where_window_line(self, key, text: str) -> None:
        w = self.windows.get(key)
        if w is None:
            return
        names = where_hits(text)
        if names:
            hits = w.finding.fields.setdefault("where", [])
            _add(hits, names)
        w.left -= 1
        if w.left <= 0:
            del self.windows[key]
