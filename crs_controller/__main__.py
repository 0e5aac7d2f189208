from crs_controller.app.cli import main

raise SystemExit(main())
