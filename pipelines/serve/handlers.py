"""What the endpoints do, as plain Python: no HTTP, no Ray (pipelines/serve/app.py wraps it).

`Engine` holds the model and a replica's copy of the serving graph and answers a whole batch of requests
at once through the recommendation engine (pipelines/recommend/engine.py) and the scoring engine
(trainer/scoring.py): the same steps, defaults and guarantees as `pencil recommend` and `pencil score`.
The parsers turn a request into what the engine takes, or a ServeError with its status and one line.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from common.retrieval import RETRIEVERS, Allowed
from pipelines.recommend.direction import DIRECTIONS, check_model_direction, known_links
from pipelines.recommend.engine import RecConfig, finish_block, prepare_block, sampler_for, scorer_for
from pipelines.recommend.relation import relation_links
from pipelines.serve.state import GraphState, ServeError, shown
from pipelines.serve.typed import relation_param
from trainer.scoring import score_columns

TOKEN_ENV = "PENCIL_SERVE_TOKEN"
MAX_DEPTH = 8  # nesting of a request body: the deepest valid one, an edit with features, has 3 levels
NO_TOKEN = (
    f"write endpoints are disabled: the service was started without a token (set {TOKEN_ENV} or pass --token-file)"
)


@dataclass(frozen=True)
class Limits:
    """Bounds on one request: what a client may ask of the service at once."""

    max_pairs: int = 10_000  # pairs per POST /score
    max_edges: int = 10_000  # pairs per POST /edges, add and remove together
    max_k: int = 1_000
    max_pool: int = 10_000
    max_body_bytes: int = 16 << 20


@dataclass(frozen=True)
class RecQuery:
    node: str  # as the path names it; looked up on the graph the batch runs on
    cfg: RecConfig


# ---------------------------------------------------------------------------- tokens
def token_digest(token: str) -> str:
    """What the replicas hold instead of the token: its sha256 (the secret never enters Ray's state)."""
    return hashlib.sha256(token.encode()).hexdigest()


def read_token(token_file: str | None, environ) -> str | None:
    """The token from --token-file, else from PENCIL_SERVE_TOKEN, else None; an empty one is refused."""
    if token_file:
        try:
            with open(token_file) as f:
                token = f.read().strip()
        except OSError as err:
            raise ValueError(f"--token-file {token_file}: cannot read it ({err.strerror})") from None
        if not token:
            raise ValueError(f"--token-file {token_file}: the file is empty; put the token in it")
        return token
    token = environ.get(TOKEN_ENV)
    if token is not None and not token.strip():
        raise ValueError(f"{TOKEN_ENV} is set but empty; set it to the token or unset it")
    return token.strip() if token else None


def check_token(authorization: str | None, digest: str | None) -> None:
    """A 401 unless `Authorization: Bearer <token>` carries the token whose sha256 is `digest`."""
    if digest is None:
        raise ServeError(401, NO_TOKEN)
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ServeError(401, "missing bearer token: send the header 'Authorization: Bearer <token>'")
    if not hmac.compare_digest(token_digest(token.strip()), digest):
        raise ServeError(401, "wrong token")


# ---------------------------------------------------------------------------- request parsing
def parse_json(data: bytes):
    """A request body as strict JSON: a key given twice in one object, NaN or Infinity, or nesting deeper than
    MAX_DEPTH is a 400 (Python's json keeps the last of two keys, reads NaN, and recurses once per level)."""
    try:
        value = json.loads(data, object_pairs_hook=_strict_object, parse_constant=_no_constant)
    except RecursionError:  # json's C parser stops at the interpreter's recursion limit
        raise ServeError(400, f"malformed JSON body: nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise ServeError(400, f"malformed JSON body: {err}") from None
    if _depth(value) > MAX_DEPTH:
        raise ServeError(400, f"malformed JSON body: nested deeper than {MAX_DEPTH} levels")
    return value


def _strict_object(pairs: list) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise ServeError(400, f"malformed JSON body: key {shown(key)} appears twice in one object; give it once")
        out[key] = value
    return out


def _no_constant(name: str):
    raise ServeError(400, f"malformed JSON body: {name} is not a JSON number")


def _depth(value) -> int:
    """How deep lists and objects nest in a parsed body (1 for a flat list); a loop, not recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:  # no need to walk further down than the limit
                stack.extend((x, level + 1) for x in (item.values() if isinstance(item, dict) else item))
    return deepest


def finite(x) -> float | None:
    """A number for JSON: None (null) for NaN or an infinity, which JSON cannot carry."""
    x = float(x)
    return x if math.isfinite(x) else None


def _int_param(params, name: str, default: int, top: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ServeError(400, f"{name}={shown(raw)}: must be an integer from 1 to {top}") from None
    if not 1 <= value <= top:
        raise ServeError(400, f"{name}={value}: out of range; use 1 to {top}")
    return value


def recommend_query(node: str, params, defaults: RecConfig, limits: Limits, typed=None) -> RecQuery:
    """GET /recommend/{node}?k=&pool=&retriever=&direction=&relation= -> a query; the defaults are `pencil
    recommend`'s (direction: a directed run's out-links; an undirected run takes none; relation: required of a typed
    run, `typed` its pipelines.serve.typed.TypedEdges). A parameter given twice is refused: which of its values
    counts would be a guess."""
    names = [name for name, _ in (params.multi_items() if hasattr(params, "multi_items") else params.items())]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise ServeError(400, f"query parameter {shown(twice)} given {names.count(twice)} times; give it once")
    extra = sorted(set(params) - {"k", "pool", "retriever", "direction", "relation"})
    if extra:
        use = "k, pool, retriever and direction" if typed is None else "k, pool, retriever, direction and relation"
        raise ServeError(400, f"unknown query parameter {shown(extra[0])}; use {use}")
    k = _int_param(params, "k", defaults.k, limits.max_k)
    pool = _int_param(params, "pool", defaults.pool, limits.max_pool)
    retriever = params.get("retriever", defaults.retriever)
    if retriever not in RETRIEVERS:
        raise ServeError(400, f"retriever={shown(retriever)}: unknown; use one of {', '.join(RETRIEVERS)}")
    if pool < k:
        raise ServeError(400, f"pool={pool} is smaller than k={k}; the pool must hold at least k candidates")
    direction, relation = _direction(params, defaults), relation_param(params, typed, ServeError)
    asked = replace(defaults, k=k, pool=pool, retriever=retriever, direction=direction, relation=relation)
    return RecQuery(node, asked)


def _direction(params, defaults: RecConfig) -> str | None:
    """direction=out|in of a directed service (its default: out); any on an undirected one is a 400."""
    raw = params.get("direction")
    if raw is None:
        return defaults.direction
    if defaults.direction is None:
        raise ServeError(400, f"direction={shown(raw)}: this service's run is undirected (its links have no direction)")
    if raw not in DIRECTIONS:
        raise ServeError(400, f"direction={shown(raw)}: use out (node -> candidate) or in (candidate -> node)")
    return raw


def score_body(body, limits: Limits, typed=None) -> list:
    """POST /score's body {"pairs": [[u, v], ...]} (a typed service's: [[head, tail, relation], ...]) -> its pairs
    (ids still unchecked)."""
    if not isinstance(body, dict):
        raise ServeError(400, 'the body must be a JSON object {"pairs": [[u, v], ...]}')
    extra = sorted(set(body) - {"pairs"})
    if extra:
        raise ServeError(400, f"unknown field {shown(extra[0])}; the body has one field, 'pairs'")
    pairs = body.get("pairs")
    if not isinstance(pairs, list) or not pairs:
        raise ServeError(400, "'pairs' must be a non-empty list of [u, v] pairs")
    if len(pairs) > limits.max_pairs:
        raise ServeError(413, f"too many pairs: {len(pairs)} in one request; the limit is {limits.max_pairs}")
    for i, pair in enumerate(pairs):
        if not isinstance(pair, list) or len(pair) != (2 if typed is None else 3):
            want = "a pair [u, v]" if typed is None else "a triple [head, tail, relation] (a typed run)"
            raise ServeError(400, f"'pairs'[{i}]: expected {want}, got {shown(pair)}")
    return pairs


def edit_size(body, limits: Limits) -> None:
    """A 413 for an edit over the limit, before it reaches the graph owner."""
    if isinstance(body, dict):
        size = sum(len(v) for v in (body.get("add"), body.get("remove")) if isinstance(v, list))
        if size > limits.max_edges:
            raise ServeError(413, f"too many edges: {size} in one edit; the limit is {limits.max_edges}")


# ---------------------------------------------------------------------------- the engine
class Engine:
    """The model on one replica's copy of the serving graph; `apply` brings the graph up to the log."""

    def __init__(self, model, state: GraphState, cfg: RecConfig, device):
        check_model_direction(model, state.digraph, "the served run")  # its model reads directions iff its set has
        direction = (cfg.direction or "out") if state.digraph is not None else None  # a directed run: out-links
        self.model, self.state, self.cfg, self.device = model, state, replace(cfg, direction=direction), device
        self._rebuild()

    def _rebuild(self) -> None:
        graph = self.state.graph
        if graph.x is not None:  # the model reads node features: every node's, new ones too (GraphState)
            import torch

            self.model.attach_features(torch.from_numpy(graph.x))
        typed = None if self.state.typed is None else self.state.typed.scoring(graph.num_nodes)
        # a directed or typed run's pairs are drawn in their order (pipelines.recommend.job)
        self.sampler = sampler_for(graph, self.cfg, self.state.digraph, typed)
        self.scorer = scorer_for(self.model, graph, self.cfg, self.device, self.state.digraph, typed)  # read

    def apply(self, records: list) -> None:
        if self.state.apply(records):
            self._rebuild()

    def warm_up(self) -> None:
        """One recommendation for the busiest node: compiles the sampler, runs a first forward pass."""
        node = int(np.argmax(self.state.graph.degree))
        cfg = self.cfg if self.state.typed is None else replace(self.cfg, relation=0)  # typed: one relation's
        self.recommend([RecQuery(str(self.state.ids.user(node)), cfg)])

    def _query_node(self, q) -> int:
        """A recommendation's node: a typed query's of its relation's head kind (tail kind for in-links)."""
        idx = self.state.ids.index(q.node)
        if self.state.typed is None or q.cfg.relation is None:
            return idx
        value, end = self.state.ids.normalise(q.node, "node"), 1 if q.cfg.direction == "in" else 0
        node = self.state.at_end(value, q.cfg.relation, end)
        if node is None:  # each kind its own id space: that id is another kind's node only
            name, what = self.state.typed.names[q.cfg.relation], ("heads", "tails")[end]
            raise ServeError(
                404, f"unknown node {shown(value)}: no node that relation {name!r} takes as {what} has that id"
            )
        return node

    def recommend(self, queries: list) -> tuple[list, int]:
        """Each query's answer (a dict, or the ServeError it gets) and the pairs scored; queries with the same
        settings share one retrieval and one scoring pass."""
        out: list = [None] * len(queries)
        groups = defaultdict(list)
        for i, q in enumerate(queries):
            try:
                groups[q.cfg].append((i, self._query_node(q)))
            except ServeError as err:
                out[i] = err
        scored = 0
        for cfg, items in groups.items():
            nodes = np.unique([idx for _, idx in items])
            kind = kinds = None
            if cfg.relation is not None:  # the relation's node kind, retrieved across kinds as recommend does
                kind = self.state.typed.candidates(cfg.relation, cfg.direction)
                kinds = self.state.typed.retrieval_kinds(cfg.relation, cfg.direction, self.state.graph.num_nodes)
            known = known_links(self._links(cfg), cfg.direction)  # never one there
            allowed = Allowed(candidates=kind, known=known, kinds=kinds)
            prep = prepare_block(0, nodes, self.state.graph, allowed, cfg, self.sampler)
            logits = self.scorer.score_blocks(prep.sampled, len(prep.node))
            table = finish_block(prep, logits, cfg)
            scored += len(prep.node)
            node = table.column("node").to_numpy()
            cols = {c: table.column(c).to_numpy() for c in ("candidate", "rank", "score", "retriever_score")}
            cand_ids = self.state.ids.users(cols["candidate"])
            for i, idx in items:
                lo, hi = np.searchsorted(node, idx, "left"), np.searchsorted(node, idx, "right")
                out[i] = {
                    "node": self.state.ids.user(idx),
                    "recommendations": [
                        {
                            "candidate": cand_ids[r],
                            "rank": int(cols["rank"][r]),
                            "score": finite(cols["score"][r]),
                            "retriever_score": finite(cols["retriever_score"][r]),
                        }
                        for r in range(lo, hi)
                    ],
                }
        return out, scored

    def _links(self, cfg: RecConfig):
        """The links a recommendation may not repeat: a typed run's triples of cfg.relation, else the digraph."""
        if cfg.relation is None:
            return self.state.digraph
        return relation_links(self.state.typed.triples, cfg.relation, self.state.graph.num_nodes)

    def score(self, requests: list) -> tuple[list, int]:
        """Each request's (a list of [u, v]) scores, or its ServeError, and the pairs scored: one pass for all."""
        out: list = [None] * len(requests)
        parts, spans = [], []
        for i, pairs in enumerate(requests):
            try:
                idx = self._pair_indices(pairs)
            except ServeError as err:
                out[i] = err
                continue
            spans.append((i, sum(len(p) for p in parts), len(idx)))
            parts.append(idx)
        if not parts:
            return out, 0
        pairs = np.concatenate(parts)
        rel = None if self.state.typed is None else pairs[:, 2]  # a typed run's: each pair's relation
        cols = score_columns(self.scorer.logits(pairs[:, :2], rel))
        users = self.state.ids.users(pairs[:, :2].ravel())
        for i, lo, n in spans:
            out[i] = {"scores": [self._scored(users[2 * r], users[2 * r + 1], cols, r) for r in range(lo, lo + n)]}
            if rel is not None:
                for r, row in zip(range(lo, lo + n), out[i]["scores"]):
                    row["relation"] = self.state.typed.names[int(rel[r])]
        return out, len(pairs)

    @staticmethod
    def _scored(src, dst, cols: dict, r: int) -> dict:
        """One pair's answer; a pair the model gave no finite score fails alone: nulls and its error."""
        row = {"src": src, "dst": dst, **{c: finite(cols[c][r]) for c in ("score", "logit", "score_std")}}
        if row["score"] is None or row["logit"] is None:
            row["error"] = "the model gave this pair no finite score (NaN or infinite); the other pairs stand"
        return row

    def _pair_indices(self, pairs: list) -> np.ndarray:
        """(P, 2) node indices, or a typed run's (P, 3) [u, v, relation id]."""
        ids, typed = self.state.ids, self.state.typed
        width = 2 if typed is None else 3  # the shape score_body checked
        rows = []
        for i, p in enumerate(pairs):
            where = f"'pairs'[{i}]"
            row = [ids.index(p[0], where), ids.index(p[1], where)]
            if typed is not None:  # each end of the relation's kind, where kinds share ids
                r = typed.relation(p[2], where, ServeError)
                row = [self.state.at_end(ids.normalise(p[k], where), r, k) for k in (0, 1)] + [r]
                if None in row:  # each kind its own id space, and that id is only another kind's node
                    end = row.index(None)
                    what = ("head", "tail")[end]
                    raise ServeError(
                        400,
                        f"{where}: {shown(p)}: its {what} is no node of the kind relation {typed.names[r]!r} takes "
                        f"as {what}s; swap head and tail, or use another relation",
                    )
                if problem := typed.kind_problem(row[0], row[1], r):  # as `pencil score`: no pair across kinds
                    raise ServeError(400, f"{where}: {shown(p)}: {problem}")
            rows.append(row)
        idx = np.array(rows, dtype=np.int64).reshape(-1, width)
        loops = np.flatnonzero(idx[:, 0] == idx[:, 1])
        if loops.size:  # as `pencil score`: a node and itself is no link to predict
            r = int(loops[0])
            raise ServeError(
                400, f"'pairs'[{r}]: pairs node {shown(pairs[r][0])} with itself; self-loops are not scored"
            )
        return idx

    def neighbors(self, node: str) -> dict:
        """A node's neighbours either way; a directed run's also apart, `out` (node -> v) and `in` (u -> node)."""
        idx, ids, digraph = self.state.ids.index(node), self.state.ids, self.state.digraph
        out = {"node": ids.user(idx), "neighbors": ids.users(self.state.graph.neighbors(idx))}
        if digraph is not None:
            heads = digraph.indices[digraph.indptr[idx] : digraph.indptr[idx + 1]]
            tails = np.searchsorted(digraph.indptr, np.flatnonzero(digraph.indices == idx), side="right") - 1
            out.update({"out": ids.users(heads), "in": ids.users(tails)})
        return out
