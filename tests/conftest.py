
import pytest





@pytest.fixture(autouse=True)
def _isolated_config(tmp_path_factory, monkeypatch):
    """Never read the developer's own ~/.config/denpex during tests."""
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))


@pytest.fixture(scope="session")
def catalog():
    from denpex_tui.core.catalog import load_catalog

    return load_catalog(include_user=False)


@pytest.fixture(scope="session")
def matcher(catalog):
    from denpex_tui.core.matcher import Matcher

    return Matcher(catalog)
