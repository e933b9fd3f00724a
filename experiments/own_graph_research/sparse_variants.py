"""Views for sparse graphs, validation only: the study's runner (experiments/own_graph_research/run.py) with the
`power` family's members (bench/graph_families.py) and deeper or wider views of the product's `deep` candidate.

    python -m experiments.own_graph_research.sparse_variants --out runs/variants --graphs power-s0-2000,grid,router \
        --variants d2n10-dist-nr3,d3n5-dist-nr3 --seeds 0

Every variant is the study's: the `general` preset as the search trains it, `--eval-splits valid`, the best
epoch's validation MRR and AUC in OUT/<graph>/<variant>/s<seed>/result.json. Three negatives a training positive
and half the default's schedule, as the search trains `deep` (the study's `d2n10-dist-nr3`, kept as the control).
"""

from __future__ import annotations

import sys

from bench.sparse_infra import MEMBERS, member
from experiments.own_graph_research import graphs, run

# name -> (sampling (d, n, hard-negative share, negatives per positive), epochs multiplier, trainer flags)
VARIANTS = {
    # three hops of 5: a sparse graph's 3-hop ball is about as many tokens as a denser one's two hops of 10; hop
    # distances clipped at 6 (a node can be 3 hops from one end and 6 from the other inside the union)
    "d3n5-dist-nr3": ((3, 5, 0, 3), 1 / 2, ["--distance-features", "6"]),
    "d3n10-dist-nr3": ((3, 10, 0, 3), 1 / 2, ["--distance-features", "6"]),
    # more neighbours per hop: on a sparse graph two hops of 20 take the whole 2-hop ball
    "d2n20-dist-nr3": ((2, 20, 0, 3), 1 / 2, ["--distance-features", "4"]),
}


def register() -> None:
    """Add the power members and the variants to the study's tables (names only; nothing there changes)."""
    for name in MEMBERS:
        graphs.SYNTHETIC.setdefault(name, member(name))
    for name, spec in VARIANTS.items():
        run.VARIANTS.setdefault(name, spec)


def main(argv=None) -> int:
    register()
    return run.main(argv)


if __name__ == "__main__":
    sys.exit(main())
