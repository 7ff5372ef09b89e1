from denpex_tui.commands import main

raise SystemExit(main())
