"""Safe text at the door: a log line can never drive the terminal."""

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from denpex_tui.core.text import safe_line, safe_str

# Anything a terminal would act on.
DANGEROUS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_sgr_kept_as_style_not_text():
    # DeepSpeed's real coloured warning (failure-messages.md A6)
    raw = b"\x1b[93m [WARNING] \x1b[0m async_io requires the dev libaio .so object and headers but these were not found."
    s = safe_line(raw)
    assert s.text == " [WARNING]  async_io requires the dev libaio .so object and headers but these were not found."
    assert s.spans == ((0, 11, "93"),)  # " [WARNING] " is coloured


def test_osc52_clipboard_write_is_shown_escaped():
    raw = b"[rank0]: step 10 \x1b]52;c;cm0gLXJmIH4K\x07 loss 2.5"
    s = safe_line(raw)
    assert "\x1b" not in s.text and "\x07" not in s.text
    assert "\\x1b]52;c;cm0gLXJmIH4K\\x07" in s.text


def test_title_link_clear_dcs_c1_bel_bs_cr():
    for raw in (
        b"\x1b]0;owned\x07",
        b"\x1b]8;;http://x\x1b\\click\x1b]8;;\x1b\\",
        b"\x1b[2J\x1b[H",
        b"\x1bP+q\x1b\\",
        "\u009b2J".encode(),
        b"bell\x07 back\x08space",
        b"ok\rFAKE",
        "rtl \u202e evil".encode(),
    ):
        s = safe_line(raw)
        assert not DANGEROUS.search(s.text), (raw, s.text)


def test_crlf_and_invalid_utf8():
    assert safe_line(b"line\r").text == "line"
    assert safe_line(b"bad \xff\xfe byte").text == "bad \ufffd\ufffd byte"


def test_safe_str_passthrough_is_identity_for_plain_text():
    assert safe_str("/scratch/run01/ckpt") == "/scratch/run01/ckpt"


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_no_bytes_can_produce_a_control_character(raw):
    s = safe_line(raw)
    assert not DANGEROUS.search(s.text)
    for start, end, sgr in s.spans:
        assert 0 <= start < end <= len(s.text)
        assert re.fullmatch(r"[0-9;:]+", sgr)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_no_text_can_produce_a_control_character(text):
    assert not DANGEROUS.search(safe_line(text).text)


# -- one set of characters, one function ------------------------------------------------------


def test_the_unsafe_set_is_every_control_format_separator_and_surrogate():
    """Cc (TAB excepted), Cf, Zl, Zp and Cs, exactly: checked against unicodedata."""
    import sys
    import unicodedata

    from denpex_tui.core.text import has_control

    want = [c for c in range(sys.maxunicode + 1)
            if c != 9 and unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp", "Cs")]
    got = [c for c in range(sys.maxunicode + 1) if has_control(chr(c))]
    assert got == want


def test_zero_width_and_direction_marks_are_escaped():
    for ch, shown in (("\u200b", "\\u200b"), ("\u200f", "\\u200f"), ("\u2028", "\\u2028"),
                      ("\u061c", "\\u061c"), ("\u2067", "\\u2067"), ("\U000e0041", "\\U000e0041")):
        assert safe_str(f"/ckpt/a{ch}b") == f"/ckpt/a{shown}b"
        assert safe_line(f"[rank0]: x{ch}y".encode()).text == f"[rank0]: x{shown}y"


def test_a_name_that_is_not_utf8_shows_its_bytes():
    import os

    name = os.fsdecode(b"rank0-\xff\x9b.log")  # what os.listdir gives for a non-UTF-8 name
    shown = safe_str(name)
    assert shown == "rank0-\\xff\\x9b.log"
    shown.encode("utf-8", "strict")  # valid UTF-8 whatever the name held


def test_an_sgr_with_a_huge_parameter_is_text_not_a_colour():
    s = safe_line(b"[rank0]: \x1b[" + b"1" * 4400 + b"mloss 2.5")
    assert s.spans == ()
    assert s.text.startswith("[rank0]: \\x1b[111") and s.text.endswith("mloss 2.5")
    # real colours still kept, 256-colour and truecolour included
    assert safe_line(b"\x1b[38;2;255;128;0mx\x1b[0m").spans == ((0, 1, "38;2;255;128;0"),)


def test_safe_json_reaches_every_string():
    from denpex_tui.core.text import safe_json

    doc = safe_json({"a\x1b": ["x\u009by", {"n": "node\u202e"}], "k": 3, "z": None})
    assert doc == {"a\\x1b": ["x\\x9by", {"n": "node\\u202e"}], "k": 3, "z": None}
