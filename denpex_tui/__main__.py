from denpex_tui.cli import main

raise SystemExit(main())
