"""Statistics of a training graph, for the search's record and its log: size, degrees, density.

They describe the graph a run was chosen on; nothing in the search branches on them.
"""

from __future__ import annotations

import numpy as np

from common.graph import Graph


def graph_stats(graph: Graph) -> dict:
    deg = graph.degree.astype(np.float64)
    n = graph.num_nodes
    return {
        "nodes": n,
        "edges": graph.num_edges,
        "mean_degree": round(float(deg.mean()), 3) if n else 0.0,
        "median_degree": float(np.median(deg)) if n else 0.0,
        "p90_degree": float(np.percentile(deg, 90)) if n else 0.0,
        "isolated_nodes": int((deg == 0).sum()),
        "density": graph.num_edges / max(1, n * (n - 1) // 2),
    }
