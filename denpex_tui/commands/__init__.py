"""Every command-line entry of Denpex: ``denpex scan|explain|signatures|probe|watch|checkpoints|
footprint|verify|evidence``. The top layer: it may use every other one, and nothing imports it."""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from .cli import main as _main

    return _main(argv)
