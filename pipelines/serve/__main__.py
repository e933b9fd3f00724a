from pipelines.serve.command import main

raise SystemExit(main())
