"""The one way the watch app is built: by ``denpex watch``, by the tests and by the screenshot
script, so all three run the same app (its engine, its probes, its themes).

The engine is made first and its history pass started before Textual is imported: on a big
job the reading then overlaps the UI's import (about a third of a second) as well as its
start-up."""

from __future__ import annotations

from typing import TYPE_CHECKING

from denpex_tui.core.catalog import Catalog, load_catalog

from .options import WatchOptions, watch_engine

if TYPE_CHECKING:
    from .app import DenpexApp

__all__ = ["make_app", "WatchOptions"]


def make_app(options: WatchOptions, catalog: Catalog | None = None, *, engine=None,
             signature_dirs: list[str] | None = None, include_user: bool = True) -> DenpexApp:
    """The app over ``options``; ``engine``: a ready engine (a replay) instead of a live one."""
    if catalog is None:
        catalog = load_catalog(signature_dirs, include_user=include_user)
    if engine is None:
        engine = watch_engine(options, catalog)
        engine.start_history()
    from .app import DenpexApp  # Textual: imported while the history is read

    return DenpexApp(options, catalog, engine=engine)
