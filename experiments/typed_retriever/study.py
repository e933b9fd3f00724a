"""Which retriever and pool size M a typed run's full ranking uses: validation recall@M only.

    python -m experiments.typed_retriever.study --dataset ../shared/data/kg/wn18rr --pools 50,100,200

For each graph retriever (common.retrieval) with and without the relation's ends fused in (common.typed_retrieval),
ranks both sides of every VALIDATION triple (filtered of train + valid, as pencil evaluate ranks valid) by the
retriever alone and prints recall@M (the pool's reach), the retriever's MRR and Hits@10, overall and per relation
(recall only). Test is never loaded into a ranking: the choice it informs is then read once on test.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from common.datasets import DatasetSpec, load_dataset
from common.retrieval import RETRIEVERS
from pipelines.recommend.engine import RecConfig
from pipelines.recommend.typed_ranking import rank_triples


def rows(dataset, pools, retrievers) -> list[str]:
    valid = dataset.relations.triples("valid", dataset.splits["valid"].pos)
    names = dataset.relations.names
    out = []
    for pool in pools:
        for method in retrievers:
            for neighbours, relation_pool in ((False, False), (False, True), (True, False), (True, True)):
                start = time.perf_counter()
                cfg = RecConfig(k=1, pool=pool, retriever=method)
                ranks = rank_triples(dataset, "valid", valid, cfg, relation_pool=relation_pool, neighbours=neighbours)
                r = ranks.ranked
                per = " ".join(
                    f"{names[k][1:7]} {100 * r.in_pool[ranks.relation == k].mean():.0f}"
                    for k in np.unique(ranks.relation)
                )
                out.append(
                    f"| {pool} | {'neighbours, ' if neighbours else ''}{method}{' + ends' if relation_pool else ''} | "
                    f"{100 * r.in_pool.mean():.2f} | "
                    f"{100 * np.mean(1 / r.retriever):.2f} | {100 * np.mean(r.retriever <= 10):.2f} | "
                    f"{time.perf_counter() - start:.0f} s | {per} |"
                )
                print(out[-1], flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True, help="a typed graph (a head/relation/tail folder)")
    p.add_argument("--pools", default="50,100,200", help="pool sizes M (default 50,100,200)")
    p.add_argument("--retrievers", default=",".join(RETRIEVERS), help="graph retrievers (default all)")
    args = p.parse_args(argv)
    dataset = load_dataset(DatasetSpec(args.dataset))
    print("| M | retriever | valid recall@M | retriever MRR | retriever Hits@10 | time | recall@M per relation |")
    print("|---|---|---|---|---|---|---|")
    rows(dataset, [int(x) for x in args.pools.split(",")], args.retrievers.split(","))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
