"""The watch TUI's non-UI parts: themes as data, the display state, the log buffer, explain's
block lookup, log discovery for ``denpex watch`` with no PATH, and the command line."""

from __future__ import annotations

import colorsys
import os
import subprocess
import sys
import time
from datetime import datetime

import pytest
from textual.color import Color

from denpex_tui.app.discover import discover_logs
from denpex_tui.app.explaining import block_of
from denpex_tui.app.model import JobSummary, WatchState, fmt_age
from denpex_tui.app.theming import DEFAULT_THEME, VARIABLE_DEFAULTS, builtin_theme_dir, load_themes, theme_from_data
from denpex_tui.core.model import Finding, Incident

# -- themes -------------------------------------------------------------------------------


def test_three_shipped_themes_load_and_define_every_variable():
    themes, problems = load_themes(include_user=False)
    assert problems == []
    names = {t.name for t in themes}
    assert {"denpex-dark", "denpex-light", "denpex-high-contrast"} <= names and DEFAULT_THEME in names
    assert {t.name: t.dark for t in themes}["denpex-light"] is False
    for t in themes:
        assert set(VARIABLE_DEFAULTS) <= set(t.variables), t.name
    # found from the checkout in an editable install (the package's themes symlink)
    assert builtin_theme_dir() is not None


def _hue(c: str) -> float:
    col = Color.parse(c)
    return colorsys.rgb_to_hls(col.r / 255, col.g / 255, col.b / 255)[0] * 360


def test_high_contrast_theme_never_pairs_red_with_green():
    [hc] = [t for t in load_themes(include_user=False)[0] if t.name == "denpex-high-contrast"]
    sev = [hc.error, hc.success, hc.warning] + [hc.variables[k] for k in (
        "denpex-initiating", "denpex-error", "denpex-collateral", "denpex-warning", "denpex-ok",
        "denpex-gauge-ok", "denpex-gauge-warn", "denpex-gauge-crit")]
    for c in sev:
        h = _hue(c)
        assert not (h >= 345 or h <= 15), f"{c} is red"
        assert not (75 <= h <= 165), f"{c} is green"


def test_bad_theme_files_are_one_line_each_and_user_themes_load(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="colors.error: 'reddish' is not a colour"):
        theme_from_data({"name": "x", "colors": {"primary": "#fff", "error": "reddish"}}, "x.toml")
    with pytest.raises(ValueError, match="name: missing"):
        theme_from_data({"colors": {"primary": "#fff"}}, "y.toml")
    user = tmp_path / "config" / "denpex" / "themes"
    user.mkdir(parents=True)
    (user / "mine.toml").write_text('name = "mine"\ndark = false\n[colors]\nprimary = "#336699"\n')
    (user / "broken.toml").write_text('name = "broken"\n[colors]\nprimary = 12\n')
    (user / "notoml.toml").write_text("name = \n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    themes, problems = load_themes()
    assert "mine" in {t.name for t in themes}
    assert len(problems) == 2 and any("broken.toml: colors.primary" in p for p in problems)


# -- display state ------------------------------------------------------------------------


def _f(rank, sig="nccl.watchdog-timeout", role="collateral", sev="error", path=None, line=2, t=None, **kw):
    return Finding(signature=sig, title=sig, role=role, severity=sev, phase="x", family="x",
                   path=path or f"/logs/rank{rank}.log", line=line, text_line=line, offset=0, text="boom",
                   rank=rank, time=t or datetime(2026, 1, 1, 0, 0, rank % 60), **kw)


def test_identical_collateral_findings_fold_into_one_group_with_rank_ranges():
    st = WatchState()
    init = _f(17, "os.enospc", "initiating")
    st.add_findings([init] + [_f(r) for r in range(300) if r != 17])
    st.set_incidents([Incident(0, init, [], [], None, "high", [], "rank 17 initiating: ...")])
    groups = st.ordered_groups()
    assert len(groups) == 2
    assert groups[0].signature == "os.enospc" and groups[0].rank_text == "rank 17"
    assert groups[1].rank_text == "ranks 0-16,18-299" and groups[1].count == 299
    assert st.ranks[17].state == "initiating" and st.ranks[3].state == "collateral"


def test_diagnosis_healthy_and_silent_rank():
    st = WatchState()
    now = 1_000_000.0
    st.set_summary(JobSummary(ranks=[0, 1, 2], last_log={0: now - 2, 1: now - 3, 2: now - 120}, sources=3), now)
    level, text = st.diagnosis(now)
    assert level == "warn" and text.startswith("rank 2 silent for 2m00s")
    st.set_summary(JobSummary(ranks=[0, 1, 2], last_log={0: now - 2, 1: now - 3, 2: now - 4}, sources=3), now)
    level, text = st.diagnosis(now)
    assert level == "ok" and text.startswith("healthy · 3 ranks")
    assert fmt_age(5) == "5s" and fmt_age(125) == "2m05s" and fmt_age(7200) == "2.0h"


# -- log buffer ---------------------------------------------------------------------------


def test_block_of_uses_the_traceback_range_of_the_findings():
    f = _f(5, "torch.save-write-failed", "initiating", path="/l/5/stderr.log", line=1,
           traceback_start=1, extra={"tb_end_line": 24})
    f.text_line = 6
    assert block_of([f], "/l/5/stderr.log", 20)[2] is f
    assert block_of([f], "/l/5/stderr.log", 25) is None
    assert block_of([f], "/l/4/stderr.log", 3) is None


# -- discovery and the command line -----------------------------------------------------


def test_watch_without_path_finds_the_logs_of_training_processes(tmp_path):
    log = tmp_path / "train.out"
    with open(log, "wb") as out:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=out, stderr=out,
                                 env=dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1"))
    try:
        time.sleep(0.3)
        d = discover_logs()
        assert child.pid in d.pids and str(log) in d.paths
        assert "following" in d.message()
    finally:
        child.kill()
        child.wait()


def test_watch_cli_help_and_no_logs_found(monkeypatch, capsys):
    from denpex_tui.commands import cli
    from denpex_tui.app import discover

    r = subprocess.run([sys.executable, "-m", "denpex_tui", "watch", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for opt in ("--pid", "--path", "--exec", "--signatures", "--theme", "--demo"):
        assert opt in r.stdout
    monkeypatch.setattr(discover, "discover_logs", lambda: discover.Discovery())
    assert cli.main(["watch"]) == 2
    err = capsys.readouterr().err
    assert "no training process" in err and "denpex watch /path/to/job/logs" in err and "--demo" in err


def test_commands_from_a_user_pack_and_incomplete_ones_say_so():
    from denpex_tui.app.widgets.fixpanel import CommandRow, command_note
    from denpex_tui.core.commands import render_command

    cmd = render_command("Free space", "df -h -- {ckpt_dir} && ls {path}", {"path": "/ckpt/x y.pt"},
                         builtin=False, pack="team-pack")
    assert cmd.text == "df -h -- <ckpt_dir> && ls '/ckpt/x y.pt'"
    assert command_note(cmd) == "[user pack: team-pack]  fill in <ckpt_dir>"
    shown = CommandRow(cmd, 1).command_text.plain
    assert "[user pack: team-pack]" in shown and "$ " + cmd.text in shown


def test_bad_start_up_input_is_one_line_and_exit_2_before_the_screen(tmp_path, capsys):
    from denpex_tui.commands import cli

    assert cli.main(["watch", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"denpex watch: {tmp_path / 'nonexistent'}: no such file or directory (--wait-for-logs waits for it)"]
    assert cli.main(["watch", str(tmp_path), "--theme", "nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("denpex watch: no theme named 'nosuch'") and "denpex-dark" in err[0]
    assert cli.main(["watch", str(tmp_path / "*.log")]) == 2
    assert "no file matches" in capsys.readouterr().err
