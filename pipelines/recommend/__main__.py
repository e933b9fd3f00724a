"""`python -m pipelines.recommend`: top-k recommendations per node (pipelines.recommend.job)."""

from common.cli import exit_process
from pipelines.recommend.job import main

exit_process(main)
