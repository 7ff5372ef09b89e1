"""Themes as data: ``themes/*.toml`` compiled to :class:`textual.theme.Theme` objects.

The top-level ``themes/`` folder of the repository is the one source. It reaches the package
as ``denpex_tui/app/themes`` (a symlink in the checkout, so an editable install sees it; real
files in the wheel, through package-data). Users can add their own themes in
``$XDG_CONFIG_HOME/denpex/themes/``; a later file replaces a theme of the same name.

Format::

    name = "denpex-dark"
    dark = true
    [colors]       # Textual's theme colours: primary (required), secondary, accent, warning,
                   # error, success, foreground, background, surface, panel, boost
    [variables]    # Denpex's own variables (denpex-initiating, denpex-gauge-crit, ...)

A bad file is one line naming the file and the field; the other themes still load.
"""

from __future__ import annotations

from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["DEFAULT_THEME", "VARIABLE_DEFAULTS", "builtin_theme_dir", "load_themes", "theme_from_data"]

DEFAULT_THEME = "denpex-dark"
COLOR_FIELDS = ("primary", "secondary", "accent", "warning", "error", "success", "foreground",
                "background", "surface", "panel", "boost")

# Every variable the widgets' CSS uses, so a theme that leaves one out (a user's, or a Textual
# built-in picked from the command palette) still works.
VARIABLE_DEFAULTS: dict[str, str] = {
    "denpex-initiating": "#FF5F5F",
    "denpex-error": "#FF8A80",
    "denpex-collateral": "#E5C07B",
    "denpex-warning": "#E5C07B",
    "denpex-ok": "#6BCB77",
    "denpex-context": "#8B95A7",
    "denpex-gauge-ok": "#6BCB77",
    "denpex-gauge-warn": "#E5C07B",
    "denpex-gauge-crit": "#FF5F5F",
    "denpex-note-background": "#1B2638",
    "denpex-match-background": "#5C4B00",
    "denpex-cursor-background": "#263247",
    "denpex-command": "#9CDCFE",
    "denpex-dim": "#8B95A7",  # muted text drawn by widgets (no alpha: component styles cannot blend)
    "denpex-border": "#3A4556",
}


def builtin_theme_dir() -> Path | None:
    """The shipped themes: inside the package (wheel, or the checkout's symlink), else the
    checkout's top-level ``themes/`` (an editable install without the symlink)."""
    here = Path(__file__).resolve().parent
    for d in (here / "themes", here.parent.parent / "themes"):
        if d.is_dir() and any(d.glob("*.toml")):
            return d
    return None


def _user_theme_dir() -> Path:
    from denpex_tui.core.config import config_dir

    return config_dir() / "themes"


def theme_from_data(data: dict, where: str) -> Theme:
    """Compile one theme file's data; ValueError names the field that is wrong."""
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{where}: name: missing or not a string")
    colors = data.get("colors", {})
    if not isinstance(colors, dict):
        raise ValueError(f"{where}: colors: must be a table")
    kwargs: dict = {}
    for key, value in colors.items():
        if key not in COLOR_FIELDS:
            raise ValueError(f"{where}: colors.{key}: unknown colour (known: {', '.join(COLOR_FIELDS)})")
        try:
            if not isinstance(value, str):
                raise ColorParseError("not a string")
            Color.parse(value)
        except ColorParseError:
            raise ValueError(f"{where}: colors.{key}: {value!r} is not a colour") from None
        kwargs[key] = value
    if "primary" not in kwargs:
        raise ValueError(f"{where}: colors.primary: missing")
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ValueError(f"{where}: variables: must be a table")
    for key, value in variables.items():
        if not isinstance(value, str):
            raise ValueError(f"{where}: variables.{key}: must be a string")
        if key in VARIABLE_DEFAULTS:
            try:
                Color.parse(value)
            except ColorParseError:
                raise ValueError(f"{where}: variables.{key}: {value!r} is not a colour") from None
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ValueError(f"{where}: dark: must be true or false")
    return Theme(name=name.strip(), dark=dark, variables={**VARIABLE_DEFAULTS, **variables}, **kwargs)


def load_themes(extra_dirs: list[Path] | None = None, *, include_user: bool = True) -> tuple[list[Theme], list[str]]:
    """(themes in load order, problems). Built-in first, then the user's, then ``extra_dirs``."""
    dirs: list[Path] = []
    b = builtin_theme_dir()
    if b is not None:
        dirs.append(b)
    if include_user:
        dirs.append(_user_theme_dir())
    dirs.extend(extra_dirs or [])
    themes: dict[str, Theme] = {}
    problems: list[str] = []
    for d in dirs:
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.toml")):
            try:
                data = tomllib.loads(f.read_text(encoding="utf-8"))
                theme = theme_from_data(data, str(f))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                problems.append(f"{f}: cannot be read ({exc})")
                continue
            except ValueError as exc:
                problems.append(str(exc))
                continue
            themes[theme.name] = theme
    return list(themes.values()), problems
