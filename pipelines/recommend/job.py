"""Top-k link recommendations per node: retrieve a pool of candidates, re-rank it with PENCIL.

    python -m pipelines.recommend --checkpoint RUN (--nodes FILE | --all-nodes) --k 20 --pool 100 \\
        --retriever {ra,aa,ppr,mix} [--orderings k] [--graph EDGES] [--bipartite] --out recs.parquet

Per block of query nodes (--block-nodes): the top --pool non-neighbours by the retriever
(common/retrieval.py), every (node, candidate) pair scored through the one scoring engine
(trainer/scoring.py), the top --k kept (pipelines/recommend/engine.py). Output Parquet columns: node,
candidate, rank (1 = best), score (sigmoid(PENCIL logit + W * -log(retriever rank)), W = --prior-weight; with
W = 0 exactly PENCIL's probability, as pipelines.score gives), retriever_score. Each finished block is a part
file in OUT's `.NAME.parts/` folder; a rerun of a killed job keeps them and computes only the rest; the parts
are merged into OUT atomically. Under `ray job submit` (RAY_ADDRESS set) or with --ray, blocks run as Ray
tasks feeding an actor pool that holds the model (pipelines/recommend/on_ray.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from common import snapshot
from common.cli import Parser, command, summary
from common.datasets import DatasetError
from common.datasets.tables import EDGE_LIST_SUFFIXES, suffix_of
from common.flags import FlagError, add_moved_dataset_flag, add_num_cpus_flag, add_overwrite_flag
from common.outputs import OutputError, check_output, check_replacement, stamp_metadata
from common.retrieval import Allowed, Kinds, RetrievalError
from common.storage import absolute_location
from pipelines.core.config import MovedDataset
from pipelines.core.runs import (
    RunFolderError,
    check_node_features,
    load_run_model,
    resolve_checkpoint,
    run_dataset,
    run_inputs,
)
from pipelines.recommend import parts
from pipelines.recommend.direction import (
    DirectionError,
    add_direction_flag,
    check_model_direction,
    known_links,
    resolve_direction,
    run_digraph,
)
from pipelines.recommend.engine import (
    RecConfig,
    RecommendError,
    add_engine_flags,
    log_short_lists,
    read_nodes,
    run_block,
    sampler_for,
    scorer_for,
)
from pipelines.recommend.relation import (
    RelationError,
    add_relation_flag,
    among,
    relation_kind,
    relation_kinds,
    relation_links,
    resolve_relation,
    run_triples,
    typed_inputs,
)
from preprocess.cluster import RayConnectError, probe_address
from trainer.run_folder import locked

log = logging.getLogger("pipelines.recommend")


PROG = "python -m pipelines.recommend"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--checkpoint", required=True, help="a run folder (best.pt, else last.pt) or a .pt file")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--nodes", help="query nodes: one id per line, or a .csv/.parquet column 'node'")
    who.add_argument("--all-nodes", action="store_true", help="recommend for every node of the graph")
    p.add_argument("--out", required=True, help="recommendations .parquet (written atomically)")
    add_overwrite_flag(p)
    add_engine_flags(p)
    p.add_argument(
        "--graph",
        default=snapshot.WHOLE,
        help="graph to recommend on: all (default: every split's edges, none proposed again), train/valid/test, "
        "or today's graph as an edge list (.csv, .tsv, .parquet; src,dst in the run's ids)",
    )
    add_direction_flag(p)
    add_relation_flag(p)
    add_moved_dataset_flag(p)
    p.add_argument(
        "--bipartite",
        action="store_true",
        help="src and dst of the edge list are two kinds of nodes: "
        "candidates only of the other kind (needs --graph EDGES or an edge-list dataset)",
    )
    p.add_argument("--ray", action="store_true", help="run on Ray (implied when RAY_ADDRESS is set)")
    add_num_cpus_flag(p)
    p.add_argument(
        "--block-nodes", type=int, default=256, advanced=True, help="query nodes per block (bounds memory; default 256)"
    )
    p.add_argument("--no-progress", action="store_true", advanced=True, help="no progress bar")
    return p


@dataclass(frozen=True)
class RecommendConfig:
    checkpoint: str  # a run folder or a .pt file
    out: str
    nodes: str | None = None  # query nodes' file; None: every node (--all-nodes)
    overwrite: bool = False
    engine: RecConfig = field(default_factory=RecConfig)  # the run's sampling is filled in when it is loaded
    device: str = "auto"
    graph: str = snapshot.WHOLE
    moved: MovedDataset = field(default_factory=MovedDataset)
    bipartite: bool = False
    direction: str | None = None  # --direction: None = out-links on a directed run (and nothing asked otherwise)
    ray: bool = False
    num_cpus: int | None = None
    progress: bool = True
    relation: str | None = None  # --relation: a typed run's relation, by name (required there, refused elsewhere)

    @classmethod
    def from_args(cls, args) -> "RecommendConfig":
        return cls(
            args.checkpoint,
            args.out,
            None if args.all_nodes else args.nodes,
            args.overwrite,
            RecConfig.from_args(args),
            args.device,
            args.graph,
            MovedDataset.from_args(args),
            args.bipartite,
            args.direction,
            args.ray,
            args.num_cpus,
            not args.no_progress,
            args.relation,
        )


def bipartite_kinds(cfg: RecommendConfig, dataset, num_nodes: int, trained_on: str, node_ids=None) -> Kinds | None:
    """--bipartite: two node kinds, each proposed the other, from the src and dst columns of --graph's edge list,
    else of the edge list the run was trained on (`trained_on`, its manifest's dataset)."""
    if not cfg.bipartite:
        return None
    if dataset.relations is not None:
        raise RecommendError(
            "--bipartite: a typed run's node kinds come from its set (a user-item file, --nodes with a type column); "
            "drop --bipartite"
        )
    source = cfg.graph if cfg.graph not in snapshot.GRAPH_NAMES else (cfg.moved.dataset or trained_on)
    if suffix_of(source) is None:
        raise RecommendError(
            f"--bipartite: the node kinds come from an edge list's src and dst columns, and the run's "
            f"dataset {source} is not an edge list; pass --graph EDGES "
            f"({', '.join(EDGE_LIST_SUFFIXES)})"
        )
    return Kinds.sides(snapshot.node_sides(source, num_nodes, dataset.node_ids if node_ids is None else node_ids))


class Progress:
    """A progress bar over query nodes with nodes/s and pairs/s."""

    def __init__(self, total: int, done: int, enabled: bool):
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, initial=done, unit="node", desc="recommend", disable=not enabled, dynamic_ncols=True
        )
        self.start, self.nodes, self.pairs = time.perf_counter(), 0, 0

    def update(self, nodes: int, pairs: int) -> None:
        self.nodes += nodes
        self.pairs += pairs
        dt = max(time.perf_counter() - self.start, 1e-9)
        self.bar.set_postfix_str(f"{self.nodes / dt:.1f} nodes/s, {self.pairs / dt:.0f} pairs/s", refresh=False)
        self.bar.update(nodes)

    def close(self) -> tuple[float, float]:
        self.bar.close()
        dt = max(time.perf_counter() - self.start, 1e-9)
        return self.nodes / dt, self.pairs / dt


# ---------------------------------------------------------------------------- the job
def recommend(job: RecommendConfig) -> int:
    from trainer.scoring import default_device

    if os.environ.get("RAY_ADDRESS"):  # a dead cluster fails here in one line, before the run is loaded
        probe_address(os.environ["RAY_ADDRESS"])
    device = default_device(job.device)
    model, manifest, fields, digest = load_run_model(job.checkpoint, device, shards=job.moved.shards)
    job = replace(job, moved=replace(job.moved, shards=absolute_location(manifest.root)))  # as the actors find it
    files, folders = run_inputs(job.checkpoint, manifest)
    out = check_output(
        job.out,
        files={
            **files,
            "--nodes": job.nodes,
            "--dataset": job.moved.dataset,
            "--graph": None if job.graph in snapshot.GRAPH_NAMES else job.graph,
        },
        folders=folders,
    )
    check_replacement(out, "recommend", manifest.fingerprint, job.overwrite, what="recommendation file")
    dataset = run_dataset(manifest, job.moved.dataset)
    graph, node_ids = snapshot.graph_for(job.graph, dataset)  # node_ids: the user's ids (None: 0..N-1)
    check_node_features(model.cfg.num_features > 0, manifest.num_nodes, graph, node_ids, f"--graph {job.graph}")
    candidates = split_candidates(dataset, job.graph)
    kinds = bipartite_kinds(job, dataset, graph.num_nodes, manifest.config["dataset"], node_ids)
    digraph = run_digraph(dataset, job.graph, graph)
    check_model_direction(model, digraph, job.checkpoint)
    direction = resolve_direction(job.direction, digraph, f"run {job.checkpoint}")
    relation = resolve_relation(job.relation, tuple(manifest.relations or ()), f"run {job.checkpoint}")
    known, typed = known_links(digraph, direction), None
    if relation is not None:  # a typed run: triples of one relation, never one that exists
        triples = run_triples(dataset, job.graph)
        typed = typed_inputs(triples, graph.num_nodes, len(manifest.relations))
        known = known_links(relation_links(triples, relation, graph.num_nodes), direction)
        candidates = among(candidates, relation_kind(dataset.relations, relation, direction))  # its node kind
        kinds = relation_kinds(dataset.relations, relation, direction)  # retrieved across kinds where it joins two
    ends = (dataset.relations.ends or {}).get(relation) if relation is not None else None
    query_kind = None if ends is None else ends[1 if direction == "in" else 0]  # an id two kinds share: this one's
    queries = (
        np.arange(graph.num_nodes, dtype=np.int64)
        if job.nodes is None
        else read_nodes(job.nodes, graph.num_nodes, node_ids, query_kind)
    )
    # the run's sampling, a directed run's direction and a typed run's relation
    cfg = replace(job.engine, **fields, direction=direction, relation=relation)
    blocks = [queries[i : i + cfg.block_nodes] for i in range(0, len(queries), cfg.block_nodes)]
    nodes_key = hashlib.sha256(queries.tobytes()).hexdigest()[:16]
    with locked(parts.parts_dir(out), "recommendation job", "--out"):  # one job per --out: parts are not shared
        graph_key = graph.fingerprint() + (digraph.fingerprint() if digraph is not None else "")  # its direction too
        across = ":kinds" if relation is not None and kinds is not None else ""  # never resumes a job without kinds
        folder = parts.open_parts(out, cfg.fingerprint(digest, graph_key, nodes_key, str(job.bipartite) + across))
        allowed = Allowed(candidates=candidates, known=known, kinds=kinds)
        work = BlockWork(graph, allowed, cfg, queries, blocks, node_ids, digraph, typed)
        return _run_blocks(job, work, model, device, out, folder, stamp_metadata("recommend", manifest.fingerprint))


def split_candidates(dataset, graph: str) -> np.ndarray | None:
    """Under a temporal split, a split's graph proposes only the nodes that exist by its boundary (nothing from
    the future); None otherwise (every node)."""
    if graph not in snapshot.SPLIT_NAMES or (nodes := dataset.active_nodes(graph)) is None:
        return None
    log.info(
        "--graph %s of a temporal split: candidates among the %s nodes with an edge before its boundary",
        graph,
        f"{len(nodes):,}",
    )
    return nodes


@dataclass(frozen=True)
class BlockWork:
    """What a job's blocks are computed on: the graph, which nodes may be proposed (`allowed`), the engine's
    configuration, the query nodes and their blocks, and the user's node ids (None: 0..N-1)."""

    graph: object
    allowed: Allowed
    cfg: RecConfig
    queries: np.ndarray
    blocks: list
    node_ids: np.ndarray | None = None
    digraph: object = None  # a directed run's ordered edges (common.graph.DiGraph), which its model reads
    typed: tuple | None = None  # a typed run's (triple CSR, relation count), which its model reads


def _run_blocks(job: RecommendConfig, work: BlockWork, model, device, out: Path, folder: Path, metadata: dict) -> int:
    """Score the blocks not in the part folder yet, then merge every part into --out."""
    graph, cfg, blocks, queries, node_ids = work.graph, work.cfg, work.blocks, work.queries, work.node_ids
    todo = [b for b in range(len(blocks)) if not parts.part_path(folder, b).exists()]
    log.info(
        "recommending top-%d of a %s pool of %d for %d nodes of %s (%d blocks, %d already done) on %s",
        cfg.k,
        cfg.retriever,
        cfg.pool,
        len(queries),
        job.graph,
        len(blocks),
        len(blocks) - len(todo),
        device,
    )
    progress = Progress(
        len(queries), sum(len(blocks[b]) for b in range(len(blocks)) if b not in set(todo)), job.progress
    )

    def done(block_id: int, table: pa.Table, pairs: int) -> None:
        parts.write_part(table, parts.part_path(folder, block_id))
        progress.update(len(blocks[block_id]), pairs)

    if job.ray or os.environ.get("RAY_ADDRESS"):
        from pipelines.recommend.on_ray import run_on_ray

        ckpt = str(resolve_checkpoint(job.checkpoint).resolve())  # absolute: the actors run in folders of their own
        run_on_ray(ckpt, work, todo, done, job.num_cpus, device.type, job.moved.shards)
    else:
        # a directed or typed run's pairs are drawn in their order (an undirected sampler draws (min, max))
        sampler = sampler_for(graph, cfg, work.digraph, work.typed)
        scorer = scorer_for(model, graph, cfg, device, work.digraph, work.typed)
        for b in todo:
            table, pairs = run_block(b, blocks[b], graph, cfg, sampler, scorer, work.allowed)
            done(b, table, pairs)
    nodes_s, pairs_s = progress.close()
    table = parts.merge_parts(folder, len(blocks), out, node_ids, metadata)
    log_short_lists(table, queries, cfg.k, node_ids)
    log.info(
        "wrote %s: %d recommendations for %d nodes (%.1f nodes/s, %.0f pairs/s)",
        out,
        table.num_rows,
        len(queries),
        nodes_s,
        pairs_s,
    )
    return 0


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, run_job, argv, prog, config=RecommendConfig.from_args)


def run_job(job: RecommendConfig) -> int:
    try:
        return recommend(job)
    except (
        RecommendError,
        RunFolderError,
        RetrievalError,
        DatasetError,
        OutputError,
        RayConnectError,
        DirectionError,
        RelationError,
    ) as err:
        raise FlagError(str(err)) from None
