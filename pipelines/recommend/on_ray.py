"""pipelines.recommend on Ray: CPU tasks retrieve and sample blocks of query nodes, an actor pool holding the
model scores them (one GPU per actor where the cluster has GPUs, else one CPU), the driver writes the parts.

Same steps as the single-process path (pipelines/recommend/engine.py), so both give the same output. At
most 2 blocks per actor are in flight (prepared or being scored), which bounds the object store's use:
a block holds block_nodes x pool pairs' node sets (256 x 100 x ~25 ids at (1, 20) ~ 5 MB per ordering).
The graph goes into the object store once; tasks read it zero-copy.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from pipelines.recommend.engine import RecConfig, finish_block, prepare_block, sampler_for, scorer_for

log = logging.getLogger("pipelines.recommend")


def _prepare(graph, allowed, cfg: RecConfig, block_id: int, queries: np.ndarray, digraph=None, typed=None):
    """`digraph`, `typed`: a directed or typed run's (its pairs are drawn in their order); None otherwise."""
    return prepare_block(block_id, np.sort(queries), graph, allowed, cfg, sampler_for(graph, cfg, digraph, typed))


class BlockScorer:
    """Actor: loads the run once, scores prepared blocks, returns (block_id, top-k table, pairs)."""

    def __init__(
        self, checkpoint: str, graph, cfg: RecConfig, device: str, shards: str | None = None, digraph=None, typed=None
    ):
        import torch

        from pipelines.core.runs import load_run_model

        torch.set_num_threads(1)  # one core per CPU actor; tasks take the others
        dev = torch.device(device if device != "cuda" or torch.cuda.is_available() else "cpu")
        model, _, _, _ = load_run_model(checkpoint, dev, shards=shards)  # the model only: the graph is the driver's
        self.cfg = cfg
        self.scorer = scorer_for(model, graph, cfg, dev, digraph, typed)  # what a directed / typed run's model reads

    def score(self, prep):
        logits = self.scorer.score_blocks(prep.sampled, len(prep.node))
        return prep.block_id, finish_block(prep, logits, self.cfg), len(prep.node)


def init_ray(num_cpus: int | None) -> bool:
    import ray

    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        from preprocess.cluster import probe_address, signals_end_attach

        probe_address(os.environ["RAY_ADDRESS"])  # Ray itself retries a dead address for minutes
        log.info("RAY_ADDRESS=%s: attaching to the cluster", os.environ["RAY_ADDRESS"])
        with signals_end_attach(os.environ["RAY_ADDRESS"]):  # SIGTERM ends the command while ray.init waits
            ray.init(log_to_driver=True)
    else:
        from pathlib import Path

        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=True,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
        )
    return True


def run_on_ray(checkpoint: str, work, todo: list, done, num_cpus, device: str, shards: str | None = None):
    """Run the `todo` blocks of `work` (pipelines.recommend.job.BlockWork); done(block_id, table, pairs) is called
    on the driver as each finishes. `checkpoint` and `shards` (the run's set, when it moved) are absolute: the
    actors run in folders of their own."""
    graph, cfg, blocks = work.graph, work.cfg, work.blocks
    import ray

    started = init_ray(num_cpus)
    try:
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        cpus = int(resources.get("CPU", 1))
        if gpus:
            actors, opts = gpus, {"num_gpus": 1, "num_cpus": 1}
        else:
            actors, opts = max(1, cpus // 2), {"num_cpus": 1}  # half the cores score, half retrieve and sample
        log.info(
            "ray: %d scoring actor(s) on %s, retrieval/sampling tasks on the remaining CPUs",
            actors,
            "GPUs" if gpus else "CPUs",
        )
        graph_ref, allowed_ref = ray.put(graph), ray.put(work.allowed)  # a directed run's known links ride along
        prepare = ray.remote(num_cpus=1)(_prepare)
        pool = [
            ray.remote(**opts)(BlockScorer).remote(
                checkpoint, graph_ref, cfg, "cuda" if gpus else "cpu", shards, work.digraph, work.typed
            )
            for _ in range(actors)
        ]
        pending, queue, turn = [], list(todo), 0
        while queue or pending:
            while queue and len(pending) < 2 * actors:  # bounded: 2 blocks per actor in flight
                b = queue.pop(0)
                prep = prepare.remote(graph_ref, allowed_ref, cfg, b, blocks[b], work.digraph, work.typed)
                pending.append(pool[turn % actors].score.remote(prep))
                turn += 1
            ready, pending = ray.wait(pending, num_returns=1)
            block_id, table, pairs = ray.get(ready[0])
            done(block_id, table, pairs)
    finally:
        if started:
            ray.shutdown()
