"""Checklist condition grammar (docs/signature-format.md) and its three-valued evaluation."""

from __future__ import annotations

import glob
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from denpex_tui.core.conditions import METRICS, parse_condition

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_metric_names_are_exactly_the_docs_table():
    with open(os.path.join(ROOT, "docs", "signature-format.md"), encoding="utf-8") as f:
        doc = f.read()
    section = doc.split("### Checklist conditions", 1)[1].split("\n### ", 1)[0]
    names = re.findall(r"^\| `([a-z_.]+)` \|", section, re.M)
    assert names and set(names) == set(METRICS)


def test_parse_and_evaluate():
    c = parse_condition("path.inodes_free_pct < 1 and path.bytes_free_pct >= 1")
    assert [(x.metric, x.op, x.value) for x in c.clauses] == [
        ("path.inodes_free_pct", "<", 1.0), ("path.bytes_free_pct", ">=", 1.0)]
    assert c.evaluate({"path.inodes_free_pct": 0.2, "path.bytes_free_pct": 40.0}) is True
    assert c.evaluate({"path.inodes_free_pct": 5.0, "path.bytes_free_pct": 40.0}) is False
    # unknown and False -> False; unknown and True -> unknown
    assert c.evaluate({"path.inodes_free_pct": 5.0}) is False
    assert c.evaluate({"path.inodes_free_pct": 0.2}) is None
    assert c.evaluate({}) is None
    assert str(c) == "path.inodes_free_pct < 1 and path.bytes_free_pct >= 1"


@pytest.mark.parametrize("op,value,expect", [
    ("<", 5, False), ("<=", 5, True), (">", 5, False), (">=", 5, True), ("==", 5, True),
    ("!=", 5, False), ("<", 5.5, True), (">", -1, True), ("==", 5.0, True)])
def test_operators(op, value, expect):
    assert parse_condition(f"proc.fd_used_pct {op} {value}").evaluate(
        {"proc.fd_used_pct": 5}) is expect


def test_whitespace_and_numbers():
    assert parse_condition("  proc.deleted_open_bytes>0  ").evaluate(
        {"proc.deleted_open_bytes": 1}) is True
    assert parse_condition("proc.deleted_open_bytes > 1e9").clauses[0].value == 1e9
    assert parse_condition("shm.bytes_free_pct < .5").clauses[0].value == 0.5


@pytest.mark.parametrize("text,msg", [
    ("", "empty"),
    ("   ", "empty"),
    ("path.nope < 1", "unknown metric 'path.nope'"),
    ("path.bytes_free_pct < x", "is not '<metric> <op> <number>'"),
    ("path.bytes_free_pct =< 1", "is not"),
    ("path.bytes_free_pct < 1 or path.inodes_free_pct < 1", "is not"),
    ("path.bytes_free_pct < 1 and", "is not"),
    ("path.bytes_free_pct < 1 and and path.inodes_free_pct < 1", "is not"),
    ("__import__('os').system('true') < 1", "is not"),
    ("path.bytes_free_pct < 1e999", "not finite"),
    ("path.bytes_free_pct < nan", "is not"),
    ("path.bytes_free_pct\n< 1", "control character"),
    ("x" * 600, "longer than"),
])
def test_errors_are_one_line(text, msg):
    with pytest.raises(ValueError) as ei:
        parse_condition(text)
    assert msg in str(ei.value)
    assert "\n" not in str(ei.value)


def test_non_string():
    with pytest.raises(ValueError):
        parse_condition(None)  # type: ignore[arg-type]


def test_unmeasured_values_are_unknown():
    c = parse_condition("proc.fd_growth_per_save > 0")
    assert c.evaluate({"proc.fd_growth_per_save": None}) is None
    assert c.evaluate({"proc.fd_growth_per_save": float("nan")}) is None
    assert c.evaluate({"proc.fd_growth_per_save": True}) is None  # a bool is not a reading


def test_every_builtin_checklist_condition_parses():
    try:
        import tomllib
    except ImportError:  # pragma: no cover
        import tomli as tomllib
    n = 0
    for fn in glob.glob(os.path.join(ROOT, "denpex_tui", "signatures", "*.toml")):
        with open(fn, "rb") as f:
            data = tomllib.load(f)
        for item in data.get("checklist", []):
            if "condition" in item:
                parse_condition(item["condition"])
                n += 1
    assert n > 0


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_fuzz_only_valueerror(text):
    try:
        c = parse_condition(text)
    except ValueError as e:
        assert "\n" not in str(e)
        return
    assert all(cl.metric in METRICS for cl in c.clauses)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(METRICS)),
                          st.sampled_from(["<", "<=", ">", ">=", "==", "!="]),
                          st.integers(-1000, 1000)), min_size=1, max_size=4),
       st.dictionaries(st.sampled_from(sorted(METRICS)),
                       st.one_of(st.none(), st.floats(-2000, 2000))))
def test_roundtrip_and_kleene_and(clauses, metrics):
    text = " and ".join(f"{m} {o} {v}" for m, o, v in clauses)
    c = parse_condition(text)
    assert parse_condition(str(c)) == parse_condition(str(c))
    results = [cl.evaluate(metrics) for cl in c.clauses]
    expect = False if False in results else (None if None in results else True)
    assert c.evaluate(metrics) is expect
