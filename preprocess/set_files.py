"""What a shard set holds besides its shards, and its manifest, as pure functions of the plan.

preprocess/job.py writes these files and the manifest on a build; on a cache hit it compares them (by
sha256, field by field) with what is on storage (preprocess/integrity.py), so a set is trusted only if it
is the one this plan would write.
"""

from __future__ import annotations

import logging

from common.node_ids import encode_node_ids, node_ids_entry
from common.shards import (
    FEATURES,
    cache_key,
    encode_array,
    encode_features,
    encode_queries,
    graph_entry,
    graph_names,
    queries_name,
    rel_graph_names,
    times_name,
)
from preprocess.targets import regression_eval_info

log = logging.getLogger("preprocess.job")


def set_files(config, dataset, sets: list, graphs: dict):
    """(name, bytes) of every file of the set besides shards and manifest, one at a time: the eval sets'
    queries, the features (--features) and the graphs the links were sampled on (readers induce each
    link's edges from them). A pure function of the plan, so a cache hit can check them by sha256."""
    for cs in sets:
        if cs.split != "train":
            pos_rel = None if cs.cands.rel is None else cs.cands.rel[cs.cands.pos_cid]  # typed: per-relation metrics
            yield queries_name(cs.split, cs.protocol), encode_queries(cs.cands.pos_cid, cs.cands.neg_cid, pos_rel)
    if config.ships_features:  # the trainer reads only the set: node features travel with it
        yield FEATURES, encode_features(dataset.x)
    for which, g in graphs.items():
        for name, arr in zip(graph_names(which), (g.indptr, g.indices)):
            yield name, encode_array(arr)
        if dataset.directed:  # the ordered edges (format version 3): readers induce each edge with its direction
            out = dataset.out_graph_for("test" if which == "test" else "train")
            for name, arr in zip(graph_names(which, out=True), (out.indptr, out.indices)):
                yield name, encode_array(arr)
        if dataset.typed:  # the triples with their relations (format version 4): the typed adjacency rows
            for name, arr in zip(rel_graph_names(which), _rel_graph(dataset, which)):
                yield name, encode_array(arr)
        times = _times(dataset, which, g)
        if times is not None:  # a temporal split's clock: the model's time input reads it
            yield times_name(which), encode_array(times[0])
    if dataset.node_ids is not None:  # the user's ids travel with the set: outputs translate back through them
        yield node_ids_entry(dataset.node_ids)["file"], encode_node_ids(dataset.node_ids)


def eval_info(dataset, sets: list, targets: dict | None) -> dict:
    info = {
        f"{cs.split}/{cs.protocol}": {
            "queries": queries_name(cs.split, cs.protocol),
            "kind": cs.cands.kind,
            "metric": dataset.selection_metric(cs.protocol),
            "ogb": cs.protocol == "ogb",
            "positives": int(len(cs.cands.pos_cid)),
            "candidates": len(cs.cands),
            **_pairs_source(dataset, cs),
            **_pool(dataset, cs),
        }
        for cs in sets
        if cs.split != "train"
    }
    return regression_eval_info(info) if targets else info


def _pool(dataset, cs) -> dict:
    """Validation's selection pool (--valid-pool): its counts, read by trainer.evaluate.protocol_negatives (the
    protocol's negatives) and the blend (pipelines.auto.signal.eval_signal)."""
    pool = dataset.valid_pool
    return {"valid_pool": pool} if pool and cs.split == "valid" and cs.protocol == pool["protocol"] else {}


def _pairs_source(dataset, cs) -> dict:
    """An eval set of the user's pairs says where its links come from: the --eval-pairs file or the split."""
    if cs.protocol != "pairs":
        return {}
    own = "pairs" in dataset.splits[cs.split].protocol_pos
    return {"links": "eval-pairs" if own else "split", "non_links": "eval-pairs"}


def planned_records(sets: list, plans: list) -> list[dict]:
    """What the plan fixes of each shard record (the rest is measured when it is sampled)."""
    return [
        {
            "name": p.name,
            "split": sets[p.set_index].split,
            "protocol": sets[p.set_index].protocol,
            "view": sets[p.set_index].view,
            "links": p.stop - p.start,
        }
        for p in plans
    ]


# What a set folder may hold that is not in the plan: anything else is left alone.
SET_FILE_SUFFIXES = (".tar", ".npz", ".npy", ".parquet")


def remove_strays(storage, keep: set[str]) -> None:
    """Remove set files that are no part of this plan (a renamed shard, a file copied in): the folder
    belongs to this set, and a rebuilt set must be byte-identical to a fresh one."""
    for name in storage.names():
        if name.endswith(SET_FILE_SUFFIXES) and name not in keep:
            log.warning("%s: not a file of this set; removed", storage.path(name))
            storage.remove(name)


def manifest_fields(
    config, dataset, fingerprint: str, protocols, plan: tuple, graphs: dict, targets: dict | None
) -> dict:
    """Every manifest field but `shards`, `files` and `totals`: a pure function of the plan, (sets, plans) of
    preprocess.plan; the key is the set's cache key (PreprocessConfig.key_parts)."""
    sets, plans = plan
    key = cache_key(config.key_parts(fingerprint, protocols))
    set_info = [
        {
            "split": cs.split,
            "protocol": cs.protocol,
            "view": cs.view,
            "graph": cs.graph,
            "links": len(cs.cands),
            "shards": sum(1 for p in plans if p.set_index == i),
        }
        for i, cs in enumerate(sets)
    ]
    return {
        "dataset": dataset.name,
        "key": key,
        "num_nodes": dataset.num_nodes,
        "n_max": config.sampling.n_max,
        "sampling": {"d": config.sampling.d, "n": config.sampling.n},
        "protocols": protocols,
        "views": config.candidates.views if "train" in config.candidates.splits else 0,
        "features": feature_entry(dataset) if config.ships_features else None,
        "graphs": {
            which: graph_entry(
                which,
                g.indptr,
                g.indices,
                out=_out_graph(dataset, which),
                rel=_rel_graph(dataset, which),
                times=_times(dataset, which, g),
            )
            for which, g in graphs.items()
        },
        "fingerprint": fingerprint,
        "config": config.to_dict(),
        "sets": set_info,
        "eval": eval_info(dataset, sets, targets),
        "targets": targets,
        # only for edge-list files, so the manifests of other sets stay as they were
        **({} if dataset.node_ids is None else {"node_ids": node_ids_entry(dataset.node_ids)}),
        # only for a temporal split: how the split was made, which the reports name
        **({} if dataset.split_info is None else {"split": dataset.split_info}),
        # only when directed (then the format version is 3): undirected manifests stay as they were
        **({"directed": True} if dataset.directed else {}),
        # only for typed triples (then the format version is 4): the relation names in id order
        **({"relations": list(dataset.relations.names)} if dataset.typed else {}),
    }


def _out_graph(dataset, which: str):
    return dataset.out_graph_for("test" if which == "test" else "train") if dataset.directed else None


def _times(dataset, which: str, graph):
    """(edge times aligned with `graph`, end) of a temporal split's graph `which`, None for any other set."""
    times = (dataset.edge_times or {}).get(which)
    if times is not None and times[0].shape != graph.indices.shape:
        raise ValueError(f"{dataset.name}: edge times of graph {which!r} do not align with its CSR")
    return times


def _rel_graph(dataset, which: str):
    """A typed set's triple CSR (indptr, indices, relation) of graph `which`, None for any other set."""
    if not dataset.typed:
        return None
    from common.datasets.kg import triple_csr

    return triple_csr(dataset, which)


def feature_entry(dataset) -> dict:
    """The manifest's record of the set's feature table; `kinds` only for a typed graph's table per node kind
    (each kind's columns), so every other set's record is as before."""
    entry = {"file": FEATURES, "dim": int(dataset.x.shape[1])}
    if dataset.feature_kinds is not None:
        entry["kinds"] = {k: [int(a), int(b)] for k, (a, b) in dataset.feature_kinds.items()}
    return entry
