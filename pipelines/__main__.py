"""`python -m pipelines` is `pencil`, the front door (pipelines.cli)."""

from pipelines.cli import main

raise SystemExit(main())
