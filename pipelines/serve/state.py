"""The serving graph: the run's graph plus every acknowledged edit, named in the user's node ids.

An edit is a record {"seq", "add", "remove"} of (u, v) pairs in the user's ids, normalised (integers for a
graph named by integers, text for one named by text). Applying the same records in the same order gives
the same graph everywhere: the graph owner, every model replica, a restarted service replaying the log.

Node features. A model that reads node features is served on a graph that holds them (the run's table): an
edit that adds a node carries its row (`features`: {id: [numbers]}), and the record logs it, so a replay builds
the same table. A new node without its row is refused with a 400: features are never invented, and a row must be
finite and within FEATURE_BOUND times the largest absolute value of the run's own features (a model fed values
far beyond what it trained on overflows float32: a score of NaN, or a 500 at every later request).

Every id and row is checked before it is logged. A log written by an earlier version may still hold what is
refused now (an id that is not valid Unicode text, a row out of bound): replaying it drops those entries, and the
pairs that name a node they would have created, the same way everywhere; `dropped` counts them.

Node ids. A graph built from an edge-list file names its nodes as the file did (the set's mapping); a new id
takes the next index, in the order edits first name it. A graph without a mapping names nodes by their index
0..N-1, as `pencil score --graph EDGES` does; a new node's id is then its index and the graph grows to it
(nodes in between are isolated). So a pair's score here equals `pencil score`'s on the same edge list,
for new nodes too when they were first named in increasing order (the snapshot's order).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from common import snapshot
from common.graph import DiGraph, Graph
from pipelines.recommend.direction import run_digraph
from pipelines.serve.feature_rows import FEATURE_BOUND, FeatureRows
from pipelines.serve.ids import LiveIds, ServeError, shown  # noqa: F401 (ServeError: imported from here)
from pipelines.serve.typed import TypedEdges, kind_columns

RECORD_KEYS = ("add", "remove")
FEATURES_KEY = "features"


class GraphState:
    """A graph, its live ids and the sequence number of the last edit applied to it. `graph.x`: the node features
    of a model that reads them (every node has its row), else None."""

    def __init__(
        self,
        graph: Graph,
        base_ids: np.ndarray | None,
        max_new_nodes: int,
        digraph: DiGraph | None = None,
        typed=None,
        kind_columns: dict[int, tuple[int, int]] | None = None,
    ):
        self.graph, self.ids, self.seq = graph, LiveIds(base_ids, graph.num_nodes), 0
        self.digraph = digraph  # a directed run's ordered edges (graph is their union, what the sampler walks)
        self.typed: TypedEdges | None = typed  # a typed run's triples (digraph: their head -> tail links)
        self.base_fingerprint = graph.fingerprint() + ("" if digraph is None else f"-directed-{digraph.fingerprint()}")
        self.base_fingerprint += "" if typed is None else f"-typed-{typed.fingerprint()}"
        self.max_new_nodes = int(max_new_nodes)
        self.dropped = 0  # entries of the log that this version refuses, dropped at replay
        # a typed run's features given a table per node kind: kind id -> its columns, so that a node an edit creates
        # may come with its kind's row alone (zeros in the other kinds' columns, as the run's table holds them)
        self.kind_columns = kind_columns if typed is not None else None
        self.feature_bound = None
        if graph.x is not None:  # from the run's own features: the same on the owner, every replica and a replay
            top = float(np.abs(graph.x).max()) if graph.x.size else 0.0
            self.feature_bound = FEATURE_BOUND * (top if top > 0 else 1.0)

    def edit_record(self, body) -> dict:
        """A POST /edits body -> the record to log (without its seq), or a ServeError: a 400 for a wrong field,
        a malformed pair, an id of the wrong kind or a node paired with itself; a 404 for removing an edge
        of an unknown node; a 400 for a new node id that would grow a graph named 0..N-1 by more than
        max_new_nodes."""
        if not isinstance(body, dict):
            raise ServeError(400, 'the body must be a JSON object {"add": [[u, v], ...], "remove": [[u, v], ...]}')
        featured = self.graph.x is not None
        extra = sorted(set(body) - set(RECORD_KEYS) - ({FEATURES_KEY} if featured else set()))
        if extra:
            fields = "'add', 'remove' and 'features' (a new node's row)" if featured else "'add' and 'remove'"
            why = "; this model reads no node features" if extra[0] == FEATURES_KEY else ""
            raise ServeError(400, f"unknown field {shown(extra[0])}; an edit has the fields {fields}{why}")
        record = {key: self._pairs(body.get(key, []), key) for key in RECORD_KEYS}
        if not record["add"] and not record["remove"]:
            raise ServeError(400, "an edit needs at least one pair in 'add' or 'remove'")
        introduced = self._introduced(record["add"])
        limit = self.ids.num_nodes + self.max_new_nodes
        bad = sorted(v for v in introduced if not self.ids.mapped and not 0 <= v < limit)
        if bad:
            raise ServeError(
                400,
                f"'add': node id {bad[0]} is out of range: this graph names its nodes "
                f"0..{self.ids.num_nodes - 1} and a new node takes an id from {self.ids.num_nodes} "
                f"to {limit - 1}",
            )
        for pair in record["remove"]:
            missing = self._ends_missing(pair) if self._own_ids else [v for v in pair[:2] if self.ids.find(v) is None]
            for value in missing:
                if value not in introduced:
                    raise ServeError(404, f"'remove': unknown node {shown(value)}: not in the serving graph")
        if featured:
            created = self._created(introduced)
            kinds = self._created_kinds(record["add"], created)
            rows = self._rows().check(body.get(FEATURES_KEY, {}), created, kinds)
            if rows:
                record[FEATURES_KEY] = rows
        return record

    def _rows(self) -> FeatureRows:
        """The checks of a new node's feature row (a graph whose model reads features: graph.x holds them)."""
        return FeatureRows(self.graph.x.shape[1], self.feature_bound, self.kind_columns, self.ids)

    @property
    def _own_ids(self) -> bool:
        """Each node kind is its own id space (a user-item graph): an edit's id names its end's kind's node."""
        return self.typed is not None and self.typed.own_ids

    def _introduced(self, added: list) -> set:
        """The ids an edit's additions create: ids of no node (of no node of their end's kind, each kind its own id
        space; there an id created for two kinds at once is refused where rows are keyed by id)."""
        if not self._own_ids:
            return {v for pair in added for v in pair[:2] if self.ids.find(v) is None}  # typed: [u, v, r]
        made = set()
        for head, tail, name in added:
            r = self.typed.names.index(name)
            made.update(
                (v, self.typed.end_kind(r, k)) for k, v in enumerate((head, tail)) if self.at_end(v, r, k) is None
            )
        twice = sorted((v for v, n in Counter(v for v, _ in made).items() if n > 1), key=str)
        if twice and self.graph.x is not None:
            raise ServeError(
                400,
                f"'add': node id {shown(twice[0])} would be created for two node kinds at once, and a new node's "
                "feature row is keyed by its id; create them in two edits",
            )
        return {v for v, _ in made}

    def _ends_missing(self, triple: list) -> list:
        """The ids of a removal's triple that name no node of their end's kind (each kind its own id space)."""
        r = self.typed.names.index(triple[2])
        return [v for k, v in enumerate(triple[:2]) if self.at_end(v, r, k) is None]

    def _created(self, introduced: set) -> list:
        """The nodes an edit creates: its new ids (a graph named 0..N-1 also grows by the ids in between)."""
        if self.ids.mapped or not introduced:
            return sorted(introduced, key=str)
        return list(range(self.ids.num_nodes, max(introduced) + 1))

    def _created_kinds(self, added: list, created: list) -> dict:
        """{created node: its kind id} where its triple's relation joins one kind to one kind (kind_columns only)."""
        if not self.kind_columns:
            return {}
        kinds = {}
        for u, v, name in added:
            r = self.typed.names.index(name)
            for node, end in ((u, 0), (v, 1)):
                kind = self.typed.end_kind(r, end)
                made = not self._own_ids or self.at_end(node, r, end) is None  # not another kind's node of that id
                if kind is not None and node in created and made:
                    kinds.setdefault(node, kind)
        return kinds

    def _pairs(self, value, key: str) -> list:
        what = "[u, v] pairs" if self.typed is None else "[head, tail, relation] triples"
        if not isinstance(value, list):
            raise ServeError(400, f"'{key}' must be a list of {what}")
        out = []
        for i, pair in enumerate(value):
            if not isinstance(pair, list) or len(pair) != (2 if self.typed is None else 3):
                shape = "a pair [u, v]" if self.typed is None else "a triple [head, tail, relation]"
                raise ServeError(400, f"'{key}'[{i}]: expected {shape}, got {shown(pair)}")
            u, v = (self.ids.normalise(x, f"'{key}'[{i}]") for x in pair[:2])
            problem = None
            if self.typed is not None:  # each end of the relation's kind: user 1 and item 1 are two nodes
                r = self.typed.relation(pair[2], f"'{key}'[{i}]", ServeError)
                head, tail = self.at_end(u, r, 0), self.at_end(v, r, 1)
                loop = head == tail if head is not None else u == v and not self._own_ids
                problem = self.typed.kind_problem(head, tail, r) if key == "add" and not loop else None
                if self._own_ids and head is None and tail is None and key == "add":  # no new pair that looks swapped
                    as_tail, as_head = self.at_end(u, r, 1), self.at_end(v, r, 0)
                    swapped = as_tail is not None and as_head is not None
                    problem = self.typed.kind_problem(as_tail, None, r) if swapped else None
            else:
                loop = u == v
            if loop:
                raise ServeError(
                    400, f"'{key}'[{i}]: pairs node {shown(pair[0])} with itself; self-loops are not edges"
                )
            if problem:
                raise ServeError(400, f"'{key}'[{i}]: {shown(pair)}: {problem}")
            out.append([u, v, *pair[2:]])
        return out

    def apply(self, records: list) -> bool:
        """Apply the records after self.seq, in order, with one rebuild of the graph; True if any was new.
        An edge's final state is its last edit's (add: present, remove: absent), so one rebuild is exact."""
        fresh = [r for r in records if r["seq"] > self.seq]
        if not fresh:
            return False
        final, rows = {}, {}
        for r in fresh:
            if r["seq"] != self.seq + 1:
                raise RuntimeError(f"edit {r['seq']} follows edit {self.seq}: the edits must be applied in order")
            given, before = self._logged_rows(r.get(FEATURES_KEY, [])), self.ids.num_nodes
            for entry in r["add"]:
                if self._entry_ok(entry) and self._replayable(entry, given):
                    self._set(final, entry, True)
            for entry in r["remove"]:
                if self._entry_ok(entry) and self._replayable(entry, None):
                    self._set(final, entry, False)
            # the rows of the nodes this edit created (where kinds share an id, the one it created)
            made = {self.ids.user(i): i for i in range(before, self.ids.num_nodes)} if self.ids.mapped else {}
            found = {node: made.get(node, self.ids.find(node)) for node in given}
            rows.update({i: given[node] for node, i in found.items() if i is not None and i >= before})
            self.seq = r["seq"]
        if self.typed is not None:  # triples: the digraph and the union follow them
            self.digraph, add, remove = self.typed.edit(final, self.ids.num_nodes)
        else:
            add = np.array([k for k, on in final.items() if on], dtype=np.int64).reshape(-1, 2)
            remove = np.array([k for k, on in final.items() if not on], dtype=np.int64).reshape(-1, 2)
        new_x = None
        if self.graph.x is not None and self.ids.num_nodes > self.graph.num_nodes:  # every new node has its row
            new_x = np.array([rows[i] for i in range(self.graph.num_nodes, self.ids.num_nodes)], dtype=np.float32)
        if self.digraph is not None and self.typed is None:
            add, remove = self._edit_directed(add, remove)
        self.graph = self.graph.edited(add, remove, self.ids.num_nodes, new_x=new_x)
        return True

    def at_end(self, value, relation: int, end: int) -> int | None:
        """The node a normalised id names as end 0 (head) or 1 (tail) of a typed relation: where node kinds share
        ids (a user-item graph's user 50 and item 50), the one of the relation's kind there; None: no node."""
        ends = self.typed.ends.get(relation) if self.typed is not None else None
        if ends is None:
            return self.ids.find(value)
        kind = self.typed.end_kind(relation, end) if self.typed.own_ids else None
        return self.ids.find_within(value, ends[end], kind)

    def _set(self, final: dict, entry: list, present: bool) -> None:
        """One logged entry's edge in `final`, its nodes made where an addition names new ones; a typed entry whose
        two ids name one node (a log edited by hand) is dropped, and counted."""
        a, b = self._node(entry, 0, present), self._node(entry, 1, present)
        if a == b:
            self.dropped += 1
            return
        final[self._key(a, b, entry)] = present

    def _node(self, entry: list, end: int, create: bool = False) -> int:
        """The node of a logged entry's end (`create`: a new id becomes the next node)."""
        if self.typed is not None:
            r = self.typed.names.index(entry[2])
            idx = self.at_end(entry[end], r, end)
            if idx is not None or self._own_ids and not create:
                return idx
            if self._own_ids:
                return self.ids.assign_of_kind(entry[end], self.typed.end_kind(r, end))
        return self.ids.assign(entry[end]) if create else self.ids.find(entry[end])

    def _key(self, a: int, b: int, entry: list) -> tuple:
        """An edge's key: (u, v) as given on a directed graph (u -> v is not v -> u), else (min, max); a typed
        graph's (head, relation, tail)."""
        if self.typed is not None:
            return self.typed.key(a, b, entry[2])
        return (a, b) if self.digraph is not None else (min(a, b), max(a, b))

    def _entry_ok(self, entry) -> bool:
        """A logged entry of this graph's shape: a pair, or a typed graph's triple of a known relation (else
        dropped at replay, and counted)."""
        ok = isinstance(entry, list) and len(entry) == (2 if self.typed is None else 3)
        ok = ok and (self.typed is None or entry[2] in self.typed.names)
        self.dropped += not ok
        return ok

    def _edit_directed(self, add: np.ndarray, remove: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply ordered edits to the digraph; return the union's edits: an added u -> v adds the pair, a removed
        one removes it only where v -> u is not an edge afterwards."""
        n, e = self.ids.num_nodes, self.digraph.edge_array()
        if len(remove):
            e = e[~np.isin(e[:, 0] * n + e[:, 1], remove[:, 0] * n + remove[:, 1])]
        self.digraph = DiGraph.from_edges(np.concatenate([e, add]), n)
        return add, remove[~self.digraph.has_edge(remove[:, 1], remove[:, 0])]

    def _logged_rows(self, entries) -> dict:
        """A record's feature rows {id: row}, those this version refuses dropped (and counted)."""
        rows = {}
        for entry in entries if self.graph.x is not None else []:
            ok = isinstance(entry, list) and len(entry) == 2 and self.ids.valid(entry[0])
            if ok and self._rows().problem(entry[1]) is None:
                rows[entry[0]] = entry[1]
            else:
                self.dropped += 1
        return rows

    def _replayable(self, entry: list, given: dict | None) -> bool:
        """Whether a logged pair applies: valid ids, two nodes, and each node it creates has its row (a featured
        model; `given` None: a removal, which creates nothing). Else it is dropped, and counted."""
        u, v = entry[0], entry[1]
        ok = self.ids.valid(u) and self.ids.valid(v) and (u != v or self.typed is not None)  # typed: _node decides
        r = self.typed.names.index(entry[2]) if ok and self._own_ids else None
        for k, value in enumerate((u, v)) if ok else ():
            if (self.ids.find(value) if r is None else self.at_end(value, r, k)) is not None:
                continue
            if given is None or (not self.ids.mapped and value < 0):
                ok = False
            elif self.graph.x is not None:
                created = [value] if self.ids.mapped else range(self.ids.num_nodes, value + 1)
                ok = ok and all(node in given for node in created)
        self.dropped += not ok
        return ok

    def summary(self) -> dict:
        if self.typed is not None:
            return {**self._directed(), "triples": len(self.typed.triples), "relations": list(self.typed.names)}
        return self._directed() if self.digraph is not None else self._plain()

    def _directed(self) -> dict:  # edges counted as the user gives them: u -> v and v -> u are two
        return {"seq": self.seq, "nodes": self.graph.num_nodes, "edges": self.digraph.num_edges, "directed": True}

    def _plain(self) -> dict:
        return {"seq": self.seq, "nodes": self.graph.num_nodes, "edges": self.graph.num_edges}


def serving_state(dataset, spec: str, max_new_nodes: int, features: bool = False) -> tuple[GraphState, dict]:
    """The graph a service starts from (`--graph`: the whole graph `all`, the default, a split's graph, or an
    edge-list file, as in `pencil score` and `pencil recommend`) and a description of it for the edit log's header.
    `features`: the model reads node features, so the graph holds the run's (a snapshot with new nodes is refused:
    pipelines.core.runs.check_node_features); else structure only."""
    graph, node_ids = snapshot.graph_for(spec, dataset)
    digraph = run_digraph(dataset, spec, graph)
    if features:
        from pipelines.core.runs import check_node_features

        check_node_features(True, dataset.num_nodes, graph, node_ids, f"--graph {spec}")
        graph = Graph(graph.indptr, graph.indices, dataset.x)
    elif graph.x is not None:  # structure only: the model reads no features
        graph = Graph(graph.indptr, graph.indices)
    state = GraphState(graph, node_ids, max_new_nodes, digraph, TypedEdges.of(dataset, spec), kind_columns(dataset))
    source = (
        f"{dataset.name}, every split's edges"
        if spec == snapshot.WHOLE
        else f"{dataset.name} {spec} graph"
        if spec in snapshot.SPLIT_NAMES
        else str(spec)
    )
    described = {
        "fingerprint": state.base_fingerprint,
        "nodes": graph.num_nodes,
        "edges": graph.num_edges,
        "source": source,
    }
    return state, described if digraph is None else {**described, "edges": digraph.num_edges, "directed": True}
