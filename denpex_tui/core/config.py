"""User configuration: defaults from ``$XDG_CONFIG_HOME/denpex/config.toml``.

Example::

    [scan]
    signatures = ["/shared/team/denpex-signatures"]
    [watch]
    theme = "denpex-dark"

Unknown keys are ignored with a warning; a broken file is one clear line on stderr and the
defaults are used.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["config_dir", "load_config", "ConfigError"]


class ConfigError(ValueError):
    pass


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME")
    if base and os.path.isabs(base):
        return Path(base) / "denpex"
    return Path.home() / ".config" / "denpex"


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME")
    if base and os.path.isabs(base):
        return Path(base) / "denpex"
    return Path.home() / ".local" / "state" / "denpex"


_SCHEMA: dict[str, dict[str, type]] = {
    "scan": {"signatures": list},
    "watch": {"theme": str, "signatures": list},
    "probe": {"interval": float, "paths": list},
}


def load_config(path: Path | None = None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Return ``(config, warnings)``. Never raises for a bad file: it warns and uses defaults."""
    path = path or (config_dir() / "config.toml")
    cfg: dict[str, dict[str, Any]] = {k: {} for k in _SCHEMA}
    warnings: list[str] = []
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return cfg, warnings
    except OSError as exc:
        return cfg, [f"config {path}: cannot be read ({exc.strerror}); using defaults"]
    try:  # imported here: most runs have no config file (tomllib is ~10 ms of every start)
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return cfg, [f"config {path}: not valid TOML ({exc}); using defaults"]
    for section, values in data.items():
        if section not in _SCHEMA or not isinstance(values, dict):
            warnings.append(f"config {path}: unknown section [{section}] ignored")
            continue
        for key, value in values.items():
            want = _SCHEMA[section].get(key)
            if want is None:
                warnings.append(f"config {path}: unknown key {section}.{key} ignored")
                continue
            if want is float and isinstance(value, int):
                value = float(value)
            if not isinstance(value, want):
                warnings.append(f"config {path}: {section}.{key} must be a {want.__name__}; ignored")
                continue
            cfg[section][key] = value
    return cfg, warnings
