from vitviz.cli import main

raise SystemExit(main())
