from distributetrain.cli.main import main

raise SystemExit(main())
