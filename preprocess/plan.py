"""Planning a shard set on the driver: which candidate sets a config asks for (splits x protocols, and the
training views) and how they cut into shards, each with its own seed. Nothing here samples or writes; the
plan is all a shard task needs to know (preprocess/job.py runs it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from common.shards import eval_shard_name, train_shard_name
from preprocess.candidates import Candidates, check_view_size, protocol_candidates, training_positives, training_view
from preprocess.config import ConfigError, PreprocessConfig
from preprocess.sampler import derive_seed

log = logging.getLogger("preprocess.job")  # the job's one log: users and tests filter its lines by this name


@dataclass
class CandidateSet:
    split: str
    protocol: str | None  # eval sets only
    view: int | None  # train sets only
    graph: str  # "train" or "test": which graph its links are sampled on
    cands: Candidates


@dataclass
class ShardPlan:
    name: str
    set_index: int
    start: int
    stop: int
    seed: int


def resolve_protocols(config: PreprocessConfig, dataset) -> list[str]:
    have = dataset.protocols
    if config.candidates.protocols is None:
        return list(have)
    missing = [p for p in config.candidates.protocols if p not in have]
    if missing:
        raise ConfigError(
            f"--protocol: {dataset.name} has no {','.join(missing)} negatives (available: {','.join(have) or 'none'})"
        )
    asked = list(config.candidates.protocols)
    if "reverse" in have and "reverse" not in asked:  # a directed set always ranks its edges against their reverse
        asked.append("reverse")
    return asked


def candidate_sets(config: PreprocessConfig, dataset, protocols: list[str]) -> list[CandidateSet]:
    cfg = config.candidates
    if dataset.typed:  # triples: their relation travels with every link (preprocess/kg_candidates.py)
        return typed_sets(config, dataset, protocols)
    sets = []
    if "train" in cfg.splits:  # degenerate sizes are refused or named before anything is sampled
        check_view_size(
            len(training_positives(dataset.splits["train"].pos)),
            cfg.percent,
            cfg.neg_ratio,
            dataset.pair_graph("train"),
        )
    for split in cfg.splits:
        if split == "train":
            for view in range(cfg.views):
                rng = np.random.default_rng(derive_seed(config.seed, "train", view))
                cands = training_view(
                    dataset.splits["train"].pos,
                    dataset.pair_graph("train"),  # directed: negatives are ordered non-edges
                    cfg,
                    rng,
                    nodes=dataset.active_nodes("train"),
                    known=dataset.train_negatives,
                )
                sets.append(CandidateSet("train", None, view, "train", cands))
            continue
        if split not in dataset.splits:
            raise ConfigError(f"--splits: {dataset.name} has no {split} split")
        for protocol in protocols:
            if protocol not in dataset.splits[split].neg:
                log.warning("%s: split %s has no %s negatives; skipped", dataset.name, split, protocol)
                continue
            graph = "test" if split == "test" and dataset.test_graph is not None else "train"
            sets.append(CandidateSet(split, protocol, None, graph, protocol_candidates(dataset, split, protocol)))
    return sets


def typed_sets(config: PreprocessConfig, dataset, protocols: list[str]) -> list[CandidateSet]:
    """A typed graph's candidate sets: training views of triples and their corruptions, eval sets "kg"."""
    from preprocess.kg_candidates import typed_protocol_candidates, typed_training_view

    cfg, sets = config.candidates, []
    for split in cfg.splits:
        if split == "train":
            for view in range(cfg.views):
                rng = np.random.default_rng(derive_seed(config.seed, "train", view))
                sets.append(CandidateSet("train", None, view, "train", typed_training_view(dataset, cfg, rng)))
        elif "kg" in protocols:  # a test graph (a user-item file's temporal split): test sampled on train + valid
            graph = "test" if split == "test" and dataset.test_graph is not None else "train"
            sets.append(CandidateSet(split, "kg", None, graph, typed_protocol_candidates(dataset, split)))
    return sets


def plan_shards(config: PreprocessConfig, sets: list[CandidateSet], num_nodes: int) -> list[ShardPlan]:
    plans = []
    per_shard = config.shard_links(num_nodes)
    for i, cs in enumerate(sets):
        for index, start in enumerate(range(0, max(len(cs.cands), 1), per_shard)):
            if len(cs.cands) == 0:
                break
            name = (
                train_shard_name(cs.view, index)
                if cs.split == "train"
                else eval_shard_name(cs.split, cs.protocol, index)
            )
            seed = derive_seed(config.seed, cs.split, cs.protocol, cs.view, index)
            plans.append(ShardPlan(name, i, start, min(start + per_shard, len(cs.cands)), seed))
    return plans
