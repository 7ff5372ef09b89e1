from denpex_tui.commands import entry

entry()
