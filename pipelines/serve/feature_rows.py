"""A new node's feature row in a served edit (pipelines.serve.state): given once, with the edit that creates the
node, of the table's width (or, on a typed run with a table per node kind, its kind's columns alone, widened with
zeros), finite and within FEATURE_BOUND times the largest |value| of the run's own features, so that a model is
never fed values far beyond what it trained on (float32 overflow: a NaN score, or a 500 at every later request).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipelines.serve.ids import LiveIds, ServeError, shown

FEATURE_BOUND = 100.0  # a new node's feature values: at most this times the run's largest |value| (1 if all are 0)


@dataclass(frozen=True)
class FeatureRows:
    """The rows' checker of one serving graph: its table's width, its bound, a typed run's columns per node kind
    id (or None) and its live ids (to name the created nodes as the edit does)."""

    width: int
    feature_bound: float
    kind_columns: dict | None
    ids: LiveIds

    def widened(self, row, kind: int | None):
        """A row of its kind's width (kind_columns) widened to the table's, zeros in other kinds' columns; any
        other row as it is (checked by `problem`)."""
        span = None if kind is None else self.kind_columns.get(kind)
        if span is None or not isinstance(row, list) or len(row) != span[1] - span[0] or len(row) == self.width:
            return row
        full = [0.0] * self.width
        full[span[0] : span[1]] = row
        return full

    def check(self, value, created: list, kinds: dict | None = None) -> list:
        """'features' {id: [numbers]} -> [[id, row], ...] for the created nodes, each row checked; a created
        node without its row, a row of another length, a non-finite or non-numeric value, or a row of a node
        the edit does not create is a 400. `kinds`: created node -> kind id, whose row may be its kind's columns
        alone (kind_columns)."""
        if not isinstance(value, dict):
            raise ServeError(
                400, f"'features' must be an object {{node: [{self.width} numbers]}}, one row per new node"
            )
        rows = {}
        for key, row in value.items():
            node = self.ids.normalise(key, "'features'")
            if node not in created:
                raise ServeError(
                    400,
                    f"'features': node {shown(key)} is not created by this edit; a node's features "
                    "are given once, with the edit that adds it",
                )
            if node in rows:
                raise ServeError(400, f"'features': node {shown(node)} is given two rows; give one")
            kind = (kinds or {}).get(node)
            row = self.widened(row, kind)
            problem = self.problem(row)
            if problem and kind is not None and kind in self.kind_columns:
                a, b = self.kind_columns[kind]
                problem += f" (or the {b - a} of its kind's own columns)"
            if problem:
                raise ServeError(400, f"'features'[{shown(key)}]: {problem}")
            rows[node] = [float(x) for x in row]
        missing = [node for node in created if node not in rows]
        if missing:
            raise ServeError(
                400,
                f"node {shown(missing[0])} is new and this model reads node features: send its "
                f'row with the edit, "features": {{{shown(missing[0])}: [{self.width} numbers]}} '
                f"({len(missing)} new node(s) without one); features are never invented",
            )
        return [[node, rows[node]] for node in created]

    def problem(self, row) -> str | None:
        """What is wrong with a feature row, or None: the width, numbers only, finite, within the bound."""
        ok = (
            isinstance(row, list)
            and len(row) == self.width
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in row)
        )
        if not ok or not np.isfinite(np.asarray(row, dtype=np.float64)).all():
            return f"expected {self.width} finite numbers, got {shown(row)}"
        if (np.abs(np.asarray(row, dtype=np.float64)) > self.feature_bound).any():
            return (
                f"a value beyond {self.feature_bound:g} ({FEATURE_BOUND:g} times the largest |value| of the "
                "features the model trained on); scale the row as the run's features were"
            )
        return None
