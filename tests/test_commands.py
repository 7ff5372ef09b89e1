"""A value taken from a log and placed in a verification command stays one harmless word."""

import shlex
import subprocess

import pytest

from denpex_tui.core.commands import TemplateError, parse_template, render_command

HOSTILE = [
    "/ckpt/a; rm -rf ~",
    "/ckpt/$(reboot)",
    "/ckpt/`id`",
    "/ckpt/it's",
    '/ckpt/"quoted"',
    "-rf",
    "/ckpt/a b\tc",
    "/ckpt/*",
]
REFUSED = [
    "/ckpt/a\nrm -rf ~",
    "/ckpt/\x1b[201~rm -rf ~",
    "/ckpt/\x1b]52;c;eA==\x07",
    "/ckpt/\rfake",
    "/ckpt/\u009b2J",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_value_is_one_shell_word(value):
    c = render_command("t", "ls -l -- {dir}", {"dir": value})
    assert c.complete
    words = shlex.split(c.text)
    assert words[:3] == ["ls", "-l", "--"]
    assert len(words) == 4
    expected = "./" + value if value.startswith("-") else value
    assert words[3] == expected
    # And a real shell agrees: printf prints the one argument back unchanged.
    out = subprocess.run(["sh", "-c", c.text.replace("ls -l --", "printf %s")], capture_output=True, text=True)
    assert out.stdout == expected


@pytest.mark.parametrize("value", REFUSED)
def test_control_characters_are_refused_not_quoted(value):
    c = render_command("t", "df -h -- {path}", {"path": value})
    assert not c.complete
    assert c.refused == ("path",)
    assert c.text == "df -h -- <path>"


def test_numeric_and_host_placeholders_are_checked():
    assert render_command("t", "ls /proc/{pid}/fd", {"pid": "123"}).text == "ls /proc/123/fd"
    assert not render_command("t", "ls /proc/{pid}/fd", {"pid": "1; reboot"}).complete
    assert not render_command("t", "ssh {node}", {"node": "-oProxyCommand=x"}).complete


def test_missing_value_is_marked():
    c = render_command("t", "df -i -- {nvme_path}", {})
    assert c.text == "df -i -- <nvme_path>" and c.missing == ("nvme_path",) and not c.complete


def test_template_errors():
    with pytest.raises(TemplateError):
        parse_template("echo {unknown}")
    with pytest.raises(TemplateError):
        parse_template("awk '{print $1}'")
    assert render_command("t", "awk '{{print $1}}' {log}", {"log": "/x"}).text == "awk '{print $1}' /x"
