from distributetrain.cli import main

raise SystemExit(main())
