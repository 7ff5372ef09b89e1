"""numpy is imported on first use (core/lines/npy.py): a small log's commands never pay for it,
and the history pool never forks while another thread is inside its import.

Both run in a fresh interpreter: the test process has numpy imported long ago."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from helpers import CORPUS, ROOT

CLEAN = CORPUS / "clean_run" / "console.log"


def _run(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_a_small_log_is_scanned_without_importing_numpy(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_bytes(CLEAN.read_bytes()[:4000])  # a few real lines of a torchrun console
    r = _run("""
        import sys
        from denpex_tui.core.scan import scan_paths
        from denpex_tui.render import report
        res = scan_paths([sys.argv[1]], include_user=False)
        assert res.bytes_read > 3000, (res.bytes_read, res.warnings)
        print("numpy" in sys.modules)
    """, str(log))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_the_history_pool_does_not_fork_while_another_thread_imports_numpy(tmp_path):
    # watch's timeline thread touches numpy while the history thread forks its pool: a worker
    # forked in the middle of that import inherited numpy's module lock held by a thread it does
    # not have, and hung at its first chunk (watch stayed "reading history"). The import is held
    # open here until half a second after it began, so the fork falls inside it every time.
    body = CLEAN.read_bytes()
    for i in range(2):  # two sources over the pool's threshold together: the pool forks
        (tmp_path / f"rank{i}.log").write_bytes(body * (26_000_000 // len(body) + 1))
    r = _run("""
        import importlib.abc, importlib.util, sys, threading
        started, release = threading.Event(), threading.Event()

        class Slow(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name != "numpy":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec("numpy")
                real = spec.loader

                class Held(importlib.abc.Loader):
                    def create_module(self, spec):
                        return real.create_module(spec)

                    def exec_module(self, module):
                        started.set()
                        release.wait()
                        real.exec_module(module)

                spec.loader = Held()
                return spec

        sys.meta_path.insert(0, Slow())
        from denpex_tui.core.catalog import load_catalog
        from denpex_tui.core.history import read_history
        from denpex_tui.core.matcher import Matcher
        from denpex_tui.core.sources import discover
        from denpex_tui.core.lines import npy as np

        assert "numpy" not in sys.modules
        srcs = discover([sys.argv[1]]).sources
        m = Matcher(load_catalog(include_user=False))
        t = threading.Thread(target=lambda: np.zeros(3), daemon=True)  # the first use imports it
        t.start()
        assert started.wait(30)
        threading.Timer(0.5, release.set).start()
        got = []
        read_history(srcs, m, got.append, jobs=2, io_timeout=30)
        print(len(got), sum(len(h.processor.errors) for h in got))
    """, str(tmp_path), timeout=150)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2", "0"]


def test_importing_now_works_once_numpy_is_imported_and_numpy_is_whole_through_it():
    # numpy's namespace is copied in on first use: it has a `load` of its own, which replaced
    # this module's function, and every later pool start failed ("load() missing 1 required
    # positional argument: 'file'")
    from denpex_tui.core.lines import npy

    npy.import_now()
    assert npy.zeros(2).tolist() == [0.0, 0.0]
    npy.import_now()
    import numpy

    assert npy.ndarray is numpy.ndarray and npy.frombuffer is numpy.frombuffer


def test_reading_and_indexing_history_never_imports_numpy_ma(tmp_path):
    # numpy 2.4's unique() asks numpy.ma whether its array is masked: a 16 ms import in every pool
    # worker, on the way to the first answer (npy.distinct does the same work without it). A
    # console of a few MB (its chunks' last MiB is looked at closely) beside the corpus's runs.
    body = CLEAN.read_bytes()
    (tmp_path / "console.log").write_bytes(body * (3_000_000 // len(body) + 1))
    r = _run("""
        import sys
        from denpex_tui.core.catalog import load_catalog
        from denpex_tui.core.history import read_history
        from denpex_tui.core.matcher import Matcher
        from denpex_tui.core.sources import discover

        srcs = discover([sys.argv[1]]).sources + discover([sys.argv[2]]).sources
        got = []
        read_history(srcs, Matcher(load_catalog(include_user=False)), got.append, jobs=1, index=True,
                     progress_steps=True, io_timeout=None)
        assert len(got) > 20 and all(h.index is not None for h in got)
        print("numpy" in sys.modules, "numpy.ma" in sys.modules)
    """, str(CORPUS), str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]


def test_distinct_is_numpys_unique_and_union():
    import numpy

    from denpex_tui.core.lines import npy

    rnd = numpy.random.default_rng(5)
    for n in (0, 1, 2, 7, 1000):
        a = rnd.integers(-3, 9, n)
        b = rnd.integers(0, 20, n // 2)
        assert npy.distinct(a).tolist() == numpy.unique(a).tolist()
        assert npy.distinct(a, b).tolist() == numpy.union1d(a, b).tolist()


def test_distinct_inverse_and_first_of_runs_are_numpys_unique_on_runs_and_on_noise():
    import numpy

    from denpex_tui.core.lines import npy

    rnd = numpy.random.default_rng(7)
    for n in (0, 1, 2, 65, 66, 1000, 50_000):
        noise = rnd.integers(-3, 9, n)
        runs = numpy.repeat(rnd.integers(0, 40, n // 50 + 1), 50)[:n]  # a chunk's lines: runs
        for a in (noise, runs):
            values, inv = numpy.unique(a, return_inverse=True)
            got_values, got_inv = npy.distinct_inverse(a)
            assert got_values.tolist() == values.tolist()
            assert got_inv.tolist() == inv.ravel().tolist()
            s = numpy.sort(a)
            assert npy.first_of_runs(s).tolist() == numpy.unique(s, return_index=True)[1].tolist()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2, reason="counts threads in /proc")
def test_numpy_loads_without_blas_threads_and_leaves_the_environment_as_it_was():
    # OpenBLAS starts a thread per core as numpy loads (a fifth of its import); Denpex does no
    # linear algebra. The setting lives for the import only: what Denpex starts gets the user's.
    code = """
        import os
        from denpex_tui.core.lines import npy
        npy.import_now()
        print(len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"))
    """
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.stdout.split() == ["1", "None"], r.stderr
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={**env, "OPENBLAS_NUM_THREADS": "2"})
    assert r.stdout.split() == ["2", "2"], r.stderr  # the user's own setting is theirs
