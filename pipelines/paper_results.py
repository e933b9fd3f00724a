"""Reference numbers from the paper (test, mean ± std, in %), printed beside our measurements.

Table 1 (original protocol; MRR, except ogbl-collab Hits@50 and ogbl-ppa Hits@100) and Table 2
(HeaRT; MRR), rows "PENCIL w/o Features" and "PENCIL"; heuristic rows of Tables 5 and 6 for citeseer.
"""
from __future__ import annotations

# (dataset, protocol) -> (metric, {model: (mean, std)})
PAPER: dict[tuple[str, str], tuple[str, dict[str, tuple[float, float]]]] = {
    ("cora", "original"): ("mrr", {"PENCIL w/o features": (42.23, 1.98), "PENCIL": (32.12, 3.04)}),
    ("citeseer", "original"): ("mrr", {"PENCIL w/o features": (47.51, 3.09), "PENCIL": (43.74, 5.47),
                                       "CN": (28.34, 0.0), "AA": (29.37, 0.0), "RA": (27.61, 0.0)}),
    ("pubmed", "original"): ("mrr", {"PENCIL w/o features": (38.28, 2.59), "PENCIL": (38.34, 5.14)}),
    ("ogbl-collab", "ogb"): ("hits@50", {"PENCIL w/o features": (66.88, 0.34), "PENCIL": (66.56, 0.19)}),
    ("ogbl-ppa", "ogb"): ("hits@100", {"PENCIL w/o features": (73.85, 0.40), "PENCIL": (79.54, 0.07)}),
    ("ogbl-citation2", "ogb"): ("mrr", {"PENCIL w/o features": (86.74, 0.26), "PENCIL": (86.86, 0.20)}),
    ("cora", "heart"): ("mrr", {"PENCIL w/o features": (14.63, 0.52), "PENCIL": (13.13, 0.53)}),
    ("citeseer", "heart"): ("mrr", {"PENCIL w/o features": (16.50, 0.31), "PENCIL": (16.80, 1.43),
                                    "CN": (8.42, 0.0), "AA": (10.82, 0.0), "RA": (10.84, 0.0)}),
    ("pubmed", "heart"): ("mrr", {"PENCIL w/o features": (7.05, 0.17), "PENCIL": (8.88, 0.49)}),
    ("ogbl-collab", "heart"): ("mrr", {"PENCIL w/o features": (5.25, 0.01), "PENCIL": (5.40, 0.05)}),
    ("ogbl-ppa", "heart"): ("mrr", {"PENCIL w/o features": (44.57, 0.15), "PENCIL": (45.43, 0.31)}),
    ("ogbl-ddi", "heart"): ("mrr", {"PENCIL w/o features": (14.07, 0.24)}),
    ("ogbl-citation2", "heart"): ("mrr", {"PENCIL w/o features": (23.36, 0.07), "PENCIL": (23.43, 0.14)}),
}


def paper_reference(dataset: str, protocol: str) -> tuple[str, dict[str, tuple[float, float]]] | None:
    return PAPER.get((dataset, protocol))
