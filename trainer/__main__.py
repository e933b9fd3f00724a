"""`python -m trainer` (single process) or `torchrun --nproc-per-node N -m trainer` (DDP): see trainer.train.

A Ctrl-C while torch and the model code import (most of the start-up) is one line and exit status 130,
as it is later (common.cli.run_cli). It is also latched (common.cli.latch_sigint): a library that swallows
the KeyboardInterrupt cannot let the run go on."""

import sys

from common.cli import exit_process, latch_sigint, raise_if_interrupted

latch_sigint()
try:
    from trainer.train import main

    raise_if_interrupted()
except KeyboardInterrupt:
    print("python -m trainer: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

exit_process(main)
