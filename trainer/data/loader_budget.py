"""Memory budget of one loader worker (--loader-memory-mb): what a batch costs while it is built, how many
training batches a worker may keep in flight beside its shuffle pool, and how large evaluation batches may be.
See trainer/data/stream.py ("Memory") for the policy; these are its numbers.
"""

from __future__ import annotations

import logging

from trainer.config_sections import ConfigError

log = logging.getLogger(__name__)

# While the pool emits, the pooled blocks, their concatenation and the permuted halves are alive at once.
SHUFFLE_PEAK = 3
# Bytes per token of a batch while it is packed (token arrays, their int64 intermediates, the torch
# tensors) plus, per context token, up to 3 bytes per possible neighbour for the graph (the dense
# uint8 row and its copy, or the sparse messages, which are only used when they are smaller).
PACK_BYTES_PER_TOKEN = 160
GRAPH_BYTES_PER_PAIR = 3
MAX_PREFETCH = 4


def batch_bytes(n_max: int, token_budget: int) -> int:
    """Estimated peak bytes of one batch while it is relabelled, induced and packed."""
    return token_budget * (PACK_BYTES_PER_TOKEN + GRAPH_BYTES_PER_PAIR * n_max)


def prefetch_depth(n_max: int, token_budget: int, data_cfg) -> int:
    """Training batches a worker may keep in flight within --loader-memory-mb (>= 1), or a one-line error."""
    total = data_cfg.loader_memory_mb * 2**20
    pool = SHUFFLE_PEAK * data_cfg.shuffle_buffer_mb * 2**20
    per_batch = batch_bytes(n_max, token_budget)
    fits = (total - pool) // per_batch - 1  # one batch is being built while the others wait
    if fits < 1:
        need = (pool + 2 * per_batch) / 2**20
        raise ConfigError(
            f"--loader-memory-mb {data_cfg.loader_memory_mb}: a loader worker needs about {need:.0f} MB "
            f"({SHUFFLE_PEAK} x --shuffle-buffer-mb {data_cfg.shuffle_buffer_mb} + 2 batches of "
            f"--token-budget {token_budget} at N_max {n_max}, {per_batch / 2**20:.1f} MB each); raise "
            "--loader-memory-mb or lower --shuffle-buffer-mb / --token-budget"
        )
    return int(min(MAX_PREFETCH, fits))


def eval_budget(n_max: int, data_cfg) -> tuple[int, int]:
    """(token budget, prefetch) of eval batches within --loader-memory-mb. Eval reads keep no shuffle pool,
    and how candidates are grouped into batches does not change any score, so a budget that does not fit
    is lowered (to at least one largest sample) instead of refused."""
    total = data_cfg.loader_memory_mb * 2**20
    per_token = batch_bytes(n_max, 1)
    budget = min(data_cfg.eval_token_budget, total // (2 * per_token))  # >= 2 batches: one built, one waiting
    one = data_cfg.orderings * (n_max + 2)  # one link, all its LRP copies
    if budget < one:
        raise ConfigError(
            f"--loader-memory-mb {data_cfg.loader_memory_mb}: too small for evaluation batches of one "
            f"link at N_max {n_max} (about {2 * one * per_token / 2**20:.0f} MB); raise it"
        )
    if budget < data_cfg.eval_token_budget:
        log.info(
            "eval batches capped at %d tokens (--eval-token-budget %d) to stay within --loader-memory-mb %d",
            budget,
            data_cfg.eval_token_budget,
            data_cfg.loader_memory_mb,
        )
    return int(budget), int(min(MAX_PREFETCH, total // (budget * per_token) - 1))
