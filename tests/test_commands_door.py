"""Every command Denpex prints or copies is built by core/commands.py.

Two checks: no module other than core/commands.py builds a shell command by string formatting
(an f-string, ``%`` or ``.format`` whose text starts with a command word), and the commands
every output actually prints stay one shell word per substituted value for a hostile path
taken from a log.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import denpex_tui

PKG = Path(denpex_tui.__file__).parent
# The programs our verification commands run: a formatted string that starts with one of
# these (or has one after ; | && $( ) is a shell command built outside core/commands.py.
COMMAND_WORDS = ("df", "du", "ls", "lsof", "grep", "tune2fs", "findmnt", "lfs", "mmlsquota", "quota",
                 "beegfs-ctl", "cat", "awk", "sort", "uniq", "head", "tail", "find", "stat", "ulimit",
                 "nvidia-smi", "dmesg", "journalctl", "mount", "ps", "kill", "rm", "python",
                 "torchrun", "echo", "sysctl", "ibstat", "ip", "ss", "ds_report", "pip")
_CMD = re.compile(r"(?:^|[;|&]\s*|\$\()\s*(?:" + "|".join(map(re.escape, COMMAND_WORDS)) + r")\s+[-/'\"{$<]")


def _formatted_strings(tree: ast.AST):
    """(line, literal text) of every string that is formatted with values at run time."""
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.FormattedValue) for v in node.values):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            yield node.lineno, text
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
                and isinstance(node.left.value, str):
            yield node.lineno, node.left.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
                and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
            yield node.lineno, node.func.value.value


def test_the_scanner_sees_the_pattern_it_looks_for():
    """The check below would catch the unquoted check commands probe used to print."""
    tree = ast.parse('where = "/x"\nc = f"df -h {where} ; df -i {where}"\nd = f"free space: {where}"\n')
    assert [t for _l, t in _formatted_strings(tree) if _CMD.search(t)] == ["df -h {} ; df -i {}"]


def test_no_module_but_core_commands_formats_a_shell_command():
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        if path == PKG / "core" / "commands.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for line, text in _formatted_strings(tree):
            if _CMD.search(text):
                offenders.append(f"{path.relative_to(PKG)}:{line}: {text!r}")
    assert offenders == [], "commands built outside core/commands.py:\n" + "\n".join(offenders)


HOSTILE_NAMES = ["a b;echo hi", "$(reboot)", "`id`", "it's", "-rf"]


def _enospc_log(tmp_path: Path, name: str) -> tuple[Path, str]:
    """A log naming an existing directory called ``name`` (so probes measure that very path)."""
    where = tmp_path / ("deep-checkpoint-folder-" * 6)  # a long path: a command is never cut short
    (where / name).mkdir(parents=True, exist_ok=True)
    d = str(where / name)
    log = tmp_path / "rank0.log"
    # failure-messages.md: a checkpoint save that hit ENOSPC, with the directory from the log
    log.write_text(f"[rank0]: OSError: [Errno 28] No space left on device: '{d}/global_step100/mp_rank_00_model_states.pt'\n")
    return log, d


def _words(cmd: str) -> list[str]:
    """The shell's words, with ; | & ( ) as words of their own (as a shell sees them)."""
    lex = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    return list(lex)


def _assert_one_word(cmd: str, d: str) -> None:
    """A word that holds the hostile directory's parent holds the whole directory: the value
    from the log is one shell word, and nothing it contains runs."""
    parent = str(Path(d).parent)
    words = _words(cmd)
    for bad in ("echo", "reboot", "id", "hi"):
        assert bad not in words, (bad, cmd)
    for w in words:
        if parent in w and w.rstrip("/") != parent:
            assert d in w, (w, cmd)


def test_probe_logs_check_commands_quote_the_path_from_the_log(tmp_path):
    for name in HOSTILE_NAMES:
        log, d = _enospc_log(tmp_path, name)
        r = subprocess.run([sys.executable, "-m", "denpex_tui", "probe", "--json", "--logs", str(log)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        checks = [c["check"] for dd in doc["differentials"] for c in dd["candidates"] if c.get("check")]
        assert checks, doc["differentials"]
        for c in checks:
            _assert_one_word(c, d)
        human = subprocess.run([sys.executable, "-m", "denpex_tui", "probe", "--logs", str(log)],
                               capture_output=True, text=True, timeout=60).stdout
        shown = [ln.split("check: ", 1)[1] for ln in human.splitlines() if "check: " in ln]
        assert shown
        for c in shown:
            _assert_one_word(c, d)


def test_scan_and_explain_commands_quote_the_path_from_the_log(tmp_path):
    for name in HOSTILE_NAMES:
        log, d = _enospc_log(tmp_path, name)
        doc = json.loads(subprocess.run([sys.executable, "-m", "denpex_tui", "scan", "--json", "--no-measure",
                                         str(log)], capture_output=True, text=True, timeout=60).stdout)
        cmds = [c["command"] for inc in doc["incidents"] for c in inc.get("fix", {}).get("commands", [])]
        human = subprocess.run([sys.executable, "-m", "denpex_tui", "scan", "--no-measure", str(log)],
                               capture_output=True, text=True, timeout=60).stdout
        cmds += [ln.split("$ ", 1)[1] for ln in human.splitlines() if ln.strip().startswith("$ ")]
        exp = subprocess.run([sys.executable, "-m", "denpex_tui", "explain", str(log)],
                             capture_output=True, text=True, timeout=60).stdout
        cmds += [ln.split("$ ", 1)[1] for ln in exp.splitlines() if ln.strip().startswith("$ ")]
        assert cmds
        for c in cmds:
            _assert_one_word(c, d)
