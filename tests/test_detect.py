"""Generic detectors on real lines: errno texts in every spelling (with the path), fatal
reports, exception lines without their traceback header. Sources are named per line."""

import pytest

from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.detect import ERRNOS, ErrnoDetector, ExceptionDetector, FatalDetector
from denpex_tui.core.lines.facts import parse_line
from denpex_tui.core.matcher import Matcher

ERRNO = ErrnoDetector()


@pytest.fixture(scope="module")
def matcher():
    return Matcher(load_catalog(include_user=False))


@pytest.mark.parametrize(
    "line,sig,errno,path",
    [
        # Python's OSError (corpus fd_leak_emfile)
        ("OSError: [Errno 24] Too many open files: '/scratch/denpex-jobs/run05'", "os.emfile", 24, "/scratch/denpex-jobs/run05"),
        # Rust I/O error through safetensors (wild a_simpletuner_safetensors_os_error_28)
        ("Error while serializing: I/O error: No space left on device (os error 28)", "os.enospc", 28, None),
        # NCCL's own WARN line (wild a_deepep_shm_enospc_then_illegal_access)
        ("misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-nyj24T to 10486116 bytes, error: No space "
         "left on device (28)", "os.enospc", 28, "/dev/shm/nccl-nyj24T"),
        # c10d's TCPStore (wild b_torchtune_two_runs_port_29500): the number in 'errno: 98 - ...'
        ("The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in use).", "os.eaddrinuse", 98, None),
        # DeepSpeed aio (failure-messages.md A1): the file it names
        ("deepspeed_aio:   open for write  failed on /local_nvme/zero_stage_3/optimizer/rank3/41.tensor.swp error = 28",
         "os.enospc", 28, "/local_nvme/zero_stage_3/optimizer/rank3/41.tensor.swp"),
        # real runs on this machine (os.strerror texts of glibc 2.36)
        ("FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/data/train.bin'", "os.enoent", 2,
         "/nonexistent/data/train.bin"),
        ("ConnectionResetError: [Errno 104] Connection reset by peer", "os.econnreset", 104, None),
        ("OSError: [Errno 12] Cannot allocate memory", "os.enomem", 12, None),
    ],
)
def test_errno_in_every_spelling(line, sig, errno, path):
    got = ERRNO.detect(parse_line(line).text)
    assert got is not None and got[0] == sig and got[1]["errno"] == errno
    assert got[1].get("path") == path


def test_the_longest_text_wins_and_everyday_phrases_need_context():
    assert ERRNO.detect("OSError: [Errno 23] Too many open files in system")[0] == "os.enfile"
    # ssh's password prompt (wild a_ds_autotuning_pdsh_ssh_permission_denied) is no failed call
    assert ERRNO.detect("Permission denied, please try again.") is None
    assert ERRNO.detect("PermissionError: [Errno 13] Permission denied: '/root/ckpt.pt'")[0] == "os.eacces"


def test_a_quoted_name_cut_short_gives_no_path():
    got = ERRNO.detect("OSError: [Errno 28] No space left on device: '/ckpt/a")
    assert got[0] == "os.enospc" and "path" not in got[1]


@pytest.mark.parametrize(
    "line,sig,signal",
    [
        ("Fatal Python error: Segmentation fault", "proc.fatal-signal", "SIGSEGV"),  # real run, faulthandler
        ("Signal: Segmentation fault (11)", "proc.fatal-signal", "SIGSEGV"),  # wild a_xtuner_openmpi_segv (OpenMPI)
        ("a: a.c:2: main: Assertion `world_size > 0' failed.", "proc.assert-failed", "SIGABRT"),  # real run, gcc assert
        ("terminate called after throwing an instance of 'std::runtime_error'", "proc.assert-failed", "SIGABRT"),  # real run
        ("Killed", "proc.killed", "SIGKILL"),  # wild a_textgen_wsl_killed_loading (the shell's report)
        # real runs of bash and zsh on this machine reporting a SIGKILLed / crashed child
        ("bash: 15391 Killed                  bash -c 'python3 -c \"import os; os.kill(os.getpid(), 9)\"' 2>&1",
         "proc.killed", "SIGKILL"),
        ('zsh: killed     python3 -c "import os; os.kill(os.getpid(), 9)"', "proc.killed", "SIGKILL"),
        ("[1]+  Killed                  sleep 100", "proc.killed", "SIGKILL"),  # bash -i job report
        ("[1]  + killed     sleep 100", "proc.killed", "SIGKILL"),  # zsh -i job report
        ("bash: 15435 Segmentation fault      bash -c 'python3 -c \"import ctypes; ctypes.string_at(0)\"' 2>&1",
         "proc.fatal-signal", "SIGSEGV"),
    ],
)
def test_fatal_reports(line, sig, signal):
    got = FatalDetector().detect(line)
    assert got is not None and got[0] == sig and got[1]["signal"] == signal


def test_words_that_are_not_a_shell_report():
    for line in ["killed by signal 9", "Process killed", "The job was Killed by the scheduler",
                 "Killed process 4321 (python) total-vm:123kB"]:
        assert FatalDetector().detect(line) is None, line


def test_exception_line_without_its_traceback_header():
    # wild b_nccl_ofi_undeliverable_rank3 starts inside the traceback
    d = ExceptionDetector().detect("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3763, remote "
                                   "process exited or there was a network error, NCCL version 2.28.8")
    assert d == ("python.uncaught-exception", {"exc_type": "torch.distributed.DistBackendError"})
    assert ExceptionDetector().detect("UserWarning: this is a warning") is None
    assert ExceptionDetector().detect("    raise ValueError('x')") is None


def test_one_rule_specific_beats_errno_beats_bare_exception(matcher):
    # an errno line explains a bare exception; a catalog signature beats the errno
    assert matcher.detect("OSError: [Errno 28] No space left on device: '/ckpt/x.pt'").sig.id == "os.enospc"
    d = matcher.detect("RuntimeError: unable to allocate shared memory(shm) for file </torch_7504_611462219_0>: "
                       "No space left on device (28)")  # corpus shm_enospc_dataloader
    assert d.sig.id == "os.shm-enospc" and d.fields["errno"] == 28


@pytest.mark.parametrize("e", ERRNOS, ids=lambda e: e.name)
def test_a_kernel_strerror_text_is_never_no_failure_found(tmp_path, e, matcher):
    log = tmp_path / "excerpt.log"
    # CPython's OSError rendering for that errno ("[Errno %S] %S: %R", failure-messages.md C1),
    # with no traceback header: an excerpt as users paste it.
    line = f"OSError: [Errno {e.number}] {e.text}: '/ckpt/step10.pt'"
    log.write_text(f"2026-11-29 10:00:00,000 INFO step 10\n{line}\n")
    import io

    from denpex_tui.core.explain import explain_text
    from denpex_tui.core.scan import scan_paths
    from denpex_tui.render.explain_view import print_explanation
    from denpex_tui.render.report import make_console, print_scan

    r = scan_paths([str(log)], include_user=False)
    out = io.StringIO()
    print_scan(r, make_console(out), measure=False)
    text = out.getvalue()
    assert r.incidents and "No failure found" not in text
    assert f"errno {e.name} ({e.number})" in text and "path /ckpt/step10.pt" in text, text
    out = io.StringIO()
    print_explanation(explain_text(log.read_bytes(), matcher=matcher), make_console(out))
    assert f"errno {e.name} ({e.number})" in out.getvalue() and "path /ckpt/step10.pt" in out.getvalue()
