"""The history pass's tasks run: in this process one by one, or across forked processes.

:mod:`.history` plans a pass (its tasks: sources, or ranges of a big file) and joins its
results; this module runs the tasks. In the calling process (:func:`run_serial`), each task in
a worker thread whose reads are watched (a hung NFS/FUSE mount is given up after ``io_timeout``
seconds inside one read). Across processes (:func:`run_pool`), forked with the compiled matcher:
the small sources first (their findings make a diagnosis "so far" while the big ones load),
then the largest task first; a task whose worker gives no result within a generous deadline is
reported as hung, and a worker dies with the scan that forked it.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, wait
from typing import Any

from . import history as _h
from .heap import reuse_big_buffers
from .history import ReadProgress, SourceHistory, _Task
from .lines import npy
from .pipeline import SourceProcessor

__all__ = ["run_pool", "run_serial", "SMALL_FIRST_BYTES"]

SMALL_FIRST_BYTES = 1 << 20

# -- running -------------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _die_with_parent(ppid: int) -> None:
    """A pool worker dies with the scan that forked it (Linux PR_SET_PDEATHSIG): a scan killed
    in its first second (``kill -TERM``, or SIGKILLed by the detached parent, cli.py) leaves no
    worker reading on. If the scan is already gone, so is this worker."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    if os.getppid() != ppid:
        os._exit(1)


def _quiet_signals() -> None:
    """A forked worker does not share its parent's signal handling: the parent's event loop (if
    any) wrote each signal to its self-pipe, and so would the worker, into the parent's pipe. ^C
    reaches the whole process group: the parent decides, and its workers die with it."""
    import signal

    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not the main thread, or no such signal
        pass


def _worker_init(nice: int, shared, ppid: int | None = None) -> None:
    _quiet_signals()
    reuse_big_buffers()  # a worker reads chunks and ends: their pages are reused, not faulted anew
    if ppid is not None:
        _die_with_parent(ppid)
    _WORKER["shared"] = shared
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass


def _worker_run(task: _Task, index: bool | str, partial_tail: bool, unknown_only: bool = False,
                progress_steps: bool = False) -> SourceHistory:
    shared = _WORKER.get("shared")
    box: dict[str, Any] = {"unknown_only": unknown_only, "progress_steps": progress_steps}
    if shared is not None:
        def count(n: int) -> None:
            with shared.get_lock():
                shared.value += n
        box["counter"] = count
    h = _h._run(task, _WORKER["matcher"], index, partial_tail, box)
    if shared is not None:
        with shared.get_lock():
            shared.value -= box.get("read", 0)  # the parent counts a finished task itself
    return h


def _last_write(task: _Task) -> float:
    try:
        return os.stat(task.info.path).st_mtime
    except OSError:
        return float("inf")


def run_serial(tasks, matcher, joiner, index, partial_tail, io_timeout, progress: ReadProgress) -> None:
    # The rank that failed first usually stopped writing first: its files, read first, make the
    # diagnosis "so far" right sooner (ranges of one file keep their order).
    order = sorted(range(len(tasks)), key=lambda i: (_last_write(tasks[i]), i)) if len(tasks) > 1 else [0]
    tasks = [tasks[i] for i in order] if tasks else tasks
    for task in tasks:
        if progress.cancelled:
            return
        box: dict[str, Any] = {"read": 0, "lock": threading.Lock(), "should_stop": lambda: progress.cancelled,
                               "unknown_only": progress.unknown_only, "progress_steps": progress.progress_steps}
        progress._boxes.append(box)
        try:
            if not io_timeout:
                h = _h._run(task, matcher, index, partial_tail, box)
            else:
                h = _guarded(task, matcher, index, partial_tail, box, io_timeout)
        finally:
            progress._boxes.remove(box)
            progress._done += max(task.size, box.get("read", 0))
        joiner.add(task, h)


def _guarded(task, matcher, index, partial_tail, box, io_timeout) -> SourceHistory:
    """The task in a worker thread; given up when a read has not returned for ``io_timeout``."""
    res: dict[str, Any] = {}

    def target() -> None:
        try:
            res["h"] = _h._run(task, matcher, index, partial_tail, box)
        except BaseException as exc:  # handed to the caller
            res["error"] = exc

    th = threading.Thread(target=target, daemon=True, name="denpex-io")
    th.start()
    while True:
        th.join(0.1)
        if not th.is_alive():
            if "error" in res:
                raise res["error"]
            return res["h"]
        since = box.get("io_since")
        if since is not None and time.monotonic() - since >= io_timeout:
            break
    why = f"{task.info.path}: a read did not answer in {io_timeout:.0f} s (hung filesystem?)"
    with box["lock"]:  # the reader is stuck in the kernel, not in the parser
        box["abandoned"] = True
        p = box.get("p")
        if p is None:
            p = SourceProcessor(task.info, matcher)
        p.close()
        p.errors.append(why + (": the rest of it was skipped" if p.line_no else ": skipped"))
        return SourceHistory(task.info, p, None, box.get("stop", task.start), box.get("ident"))


def run_pool(tasks, matcher, joiner, n_jobs, index, partial_tail, polite, io_timeout, progress) -> None:
    """Tasks across forked processes that inherit the compiled matcher. A task whose worker
    gives no result within a generous deadline (its size at 5 MB/s, and at least
    ``io_timeout``) is reported as hung."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor  # (imported here: a small job never forks)
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
    if ctx is None:
        run_serial(tasks, matcher, joiner, index, partial_tail, io_timeout, progress)
        return
    npy.import_now()  # before the fork: no worker may inherit numpy half-imported by another thread
    matcher.prefilter  # noqa: B018 - compiled (or loaded) once, here: the workers inherit it
    _WORKER["matcher"] = matcher  # the workers start with it compiled
    # the small sources first (a few ms in all: the ranks' short logs, their errors and timeouts,
    # make the diagnosis "so far" while the big ones load), then the last range of each file cut
    # in ranges (a failed job's file ends with its tracebacks and the launcher's summary: the
    # bench job's as one file cost 0.10 s a range there, 0.03-0.05 elsewhere), then the largest
    # first, so that the workers end together. (A file read whole is no last range: the bench
    # folder's four rank logs, 17 ms each, went before its console's 30 ms ranges, and one
    # worker read the last of those alone for 30 ms.)
    order = sorted(tasks, key=lambda t: (t.size >= SMALL_FIRST_BYTES, t.parts < 2 or t.part != t.parts - 1, -t.size))
    progress._shared = ctx.Value("q", 0)
    pool = ProcessPoolExecutor(max_workers=min(n_jobs, len(order)), initializer=_worker_init,
                               initargs=(10 if polite else 0, progress._shared, os.getpid()), mp_context=ctx)
    hung = False
    again: list = []  # the tasks a worker that died took with it (OOM-killed, kill -9)
    try:
        futures = {pool.submit(_worker_run, t, index, partial_tail, progress.unknown_only, progress.progress_steps):
                   [t, None] for t in order}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            if progress.cancelled:
                hung = True  # the workers are killed, not waited for
                return
            for f in done:
                t = futures[f][0]
                try:
                    h = f.result()
                except BrokenProcessPool:
                    again.append(t)
                    continue
                progress._done += t.size
                joiner.add(t, h)
            if again:  # the pool is broken: every task not done yet is read again here
                again += [futures[f][0] for f in pending]
                hung = True
                break
            now = time.monotonic()
            for f in list(pending):
                rec = futures[f]
                if rec[1] is None and f.running():
                    rec[1] = now  # its clock starts when a worker takes it
                if io_timeout and rec[1] is not None and now - rec[1] > max(io_timeout, rec[0].size / 5e6):
                    t = rec[0]
                    p = SourceProcessor(t.info, matcher)
                    p.errors.append(f"{t.info.path}: no result after {now - rec[1]:.0f} s (hung filesystem?): skipped")
                    joiner.add(t, SourceHistory(t.info, p, None, t.start))
                    pending.discard(f)
                    hung = True
    finally:
        _WORKER.pop("matcher", None)
        if hung:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.kill()
        # every result is in: the workers' own exits (their interpreters' teardown, ~5 ms) are
        # not waited for (the pool's thread reaps them)
        pool.shutdown(wait=False, cancel_futures=True)
    if again:
        progress._shared = None  # the dead workers' counts: their tasks are read again
        note = (f"a reader process ended abruptly (killed: out of memory?); {len(again)} of the "
                "history's reads were done again in this process")
        run_serial(again, matcher, _Noted(joiner, note), index, partial_tail, io_timeout, progress)


class _Noted:
    """A joiner that adds a note to the first result it is given (it says why it was read twice)."""

    def __init__(self, joiner, note: str) -> None:
        self.joiner, self.note = joiner, note

    def add(self, task: _Task, h: SourceHistory) -> None:
        if self.note:
            h.processor.errors.append(self.note)
            self.note = ""
        self.joiner.add(task, h)
