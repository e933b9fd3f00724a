"""`python -m pipelines.recommend`: top-k recommendations per node (pipelines.recommend.job)."""

from pipelines.recommend.job import main

raise SystemExit(main())
