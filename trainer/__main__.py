"""`python -m trainer` (single process) or `torchrun --nproc-per-node N -m trainer` (DDP): see trainer.train."""
from trainer.train import main

raise SystemExit(main())
