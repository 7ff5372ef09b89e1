"""The prefix-format registry: every format on its own real example lines, stacked prefixes,
lines that must not be taken for a prefix, and numbers out of any sane range."""

import re

import pytest

from denpex_tui.core.lines.heads import stream_labels
from denpex_tui.core.lines.facts import parse_line
from denpex_tui.core.lines.formats import FORMATS, compile_prefix_template, set_prefix_template

EXAMPLES = [(f.name, ex) for f in FORMATS for ex in f.examples]


@pytest.mark.parametrize("name,line", EXAMPLES, ids=[f"{n}[{i}]" for i, (n, _) in enumerate(EXAMPLES)])
def test_every_format_reads_its_own_examples(name, line):
    assert name in parse_line(line).formats


@pytest.mark.parametrize(
    "line,expect",
    [
        # torchrun --tee 3 over torch's excepthook prefix (corpus enospc_checkpoint_fastfail)
        ("[default2]:[rank2]: RuntimeError: basic_ios::clear: iostream error",
         dict(local_rank=2, rank=2, text="RuntimeError: basic_ios::clear: iostream error")),
        # srun --label (failure-messages.md G7)
        ("  5: [rank5]: Traceback (most recent call last):", dict(task=5, rank=5, text="Traceback (most recent call last):")),
        # DeepSpeed's pdsh runner (G8)
        ("node-3: [2024-01-01 10:00:00,000] [INFO] [launch.py:80:main] WORLD INFO DICT", dict(host="node-3")),
        # mpirun / Horovod (wild corpus b_horovod_shutdown_collateral_rank0_oom)
        ("[1,1]<stderr>:RuntimeError: Horovod has been shut down.", dict(rank=1, text="RuntimeError: Horovod has been shut down.")),
        # NCCL (D14), with the host, pid and device
        ("node-1:185:1027 [7] NCCL INFO [Service thread] Connection closed by localRank 0",
         dict(host="node-1", pid=185, device=7, text="NCCL INFO [Service thread] Connection closed by localRank 0")),
        # NCCL >= 2.26 with its own timestamp
        ("[2025-03-04 10:11:12] node-1:185:1027 [7] NCCL WARN Call to bind failed : Address already in use",
         dict(host="node-1", device=7, time_text="2025-03-04 10:11:12")),
        # glog (F3): level and time from the header
        ("E0731 10:50:08.043000 3247964 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)",
         dict(level="error", pid=3247964, precision=1e-6)),
        # DeepSpeed log_dist (B2): the rank inside the text
        ("[2024-04-09 15:39:37,942] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model checkpoint: x",
         dict(rank=0, level="info")),
        ("[2025-03-25 18:12:45,948] [INFO] [logging.py:96:log_dist] [Rank -1] DeepSpeed info: version=0.14.0",
         dict(rank=None)),
        # kubectl logs --prefix
        ("[pod/llama-train-worker-1/pytorch] [rank1]: Traceback (most recent call last):",
         dict(host="llama-train-worker-1", rank=1, text="Traceback (most recent call last):")),
        # OpenMPI's signal report (wild corpus a_xtuner_openmpi_segv_mpi4py_import)
        ("[dsw-541920-5fd5c64bc4-m25b4:02519] Signal: Segmentation fault (11)",
         dict(host="dsw-541920-5fd5c64bc4-m25b4", pid=2519, text="Signal: Segmentation fault (11)")),
    ],
)
def test_fields(line, expect):
    p = parse_line(line)
    for k, v in expect.items():
        assert getattr(p, k) == v, (k, getattr(p, k))


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 1 vs 2",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "12:34:56 something",
        "Traceback (most recent call last):",
        "NCCL WARN Cuda failure 'out of memory'",
    ],
)
def test_not_a_prefix(line):
    p = parse_line(line)
    assert p.host is None and p.task is None and p.rank is None and p.text == line


@pytest.mark.parametrize("tmpl", ["[rank" + "9" * 4301 + "]: x", "[default" + "7" * 4301 + "]: x",
                                  "  " + "1" * 4301 + ": x", "[1," + "2" * 4301 + "]<stderr>:x"])
def test_numbers_out_of_range_are_text(tmpl):
    p = parse_line(tmpl)
    assert p.rank is None and p.local_rank is None and p.task is None
    assert stream_labels(tmpl.encode() + b"\n") == {}


def test_prefix_template():
    f = compile_prefix_template("[${role_name}${local_rank}|${rank}|${hostname}]:")
    set_prefix_template("[${role_name}${local_rank}|${rank}|${hostname}]:")
    try:
        p = parse_line("[trainer3|11|node-b]:OSError: [Errno 24] Too many open files")
        assert (p.local_rank, p.rank, p.host, p.role_name) == (3, 11, "node-b", "trainer")
        assert p.text == "OSError: [Errno 24] Too many open files"
    finally:
        set_prefix_template(None)
    assert f.name == "prefix-template"
    with pytest.raises(ValueError):
        compile_prefix_template("${nope}")


def test_stream_labels_of_a_chunk():
    data = b"[default0]:a\n[default1]:b\n[rank3]: c\n  4: d\n[0,5]<stderr>:e\nplain\n"
    labels = stream_labels(data)
    assert sorted(labels.values()) == [0, 1, 3, 4, 5]


def _real_lines():
    """Lines of every log we keep (the test fixtures: the corpus's runs, the wild logs, our
    runs) and of the reference's quoted messages where they are at hand, cut to 2 KB: up to
    400 a file, spread over it."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    files = sorted(p for p in (here / "fixtures").rglob("*") if p.is_file() and p.suffix in (".log", ".txt", ""))
    reference = here.parents[1] / "shared" / "reference" / "failure-messages.md"
    files += [reference] if reference.exists() else []  # (beside the repo where it was made)
    out: list[str] = []
    for p in files:
        try:
            lines = p.read_bytes().decode("utf-8", "replace").splitlines()
        except OSError:
            continue
        step = max(1, len(lines) // 400)
        out += [ln[:2048] for ln in lines[::step]]
    return out


def _facts_of(lines):
    from dataclasses import asdict

    return [asdict(parse_line(ln)) for ln in lines]


@pytest.mark.parametrize("template", [None, "[${role_name}${local_rank}]:"])
def test_the_joined_formats_read_every_real_line_as_the_formats_one_by_one(monkeypatch, template):
    """The one expression that names the first format matching at a position (and tells in
    one match that none does) gives every real line the facts the formats tried one by one
    give it, with the user's prefix template too."""
    from denpex_tui.core.lines import formats

    lines = _real_lines()
    assert len(lines) > 3000
    set_prefix_template(template)
    try:
        assert formats.first_format() is not None
        joined = _facts_of(lines)
        monkeypatch.setattr(formats, "_FIRST", [None])  # each format alone
        alone = _facts_of(lines)
    finally:
        set_prefix_template(None)
    assert sum(bool(f["formats"]) for f in alone) > len(lines) // 10
    for ln, a, b in zip(lines, joined, alone):
        assert a == b, ln


def test_formats_that_cannot_be_joined_are_tried_one_by_one():
    """A template whose expression refers to its own group by number cannot be an alternative
    among the others (the groups around them renumber it): the formats are then tried alone, and
    the template still reads its lines."""
    from denpex_tui.core.lines import formats

    set_prefix_template("${hostname}|")
    try:
        assert formats.first_format() is not None
        formats._template[0] = formats.PrefixFormat("prefix-template", re.compile(r"(?P<host>h\d)-\1 "), ())
        formats._FIRST.clear()
        assert formats.first_format() is None
        f = parse_line("h1-h1 RuntimeError: x")
        assert f.host == "h1" and f.text == "RuntimeError: x"
    finally:
        set_prefix_template(None)
