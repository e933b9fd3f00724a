"""The GNN row of the recommendation table: a GCN/SAGE dot-product model ranking ALL nodes natively, under
the same filtered full-ranking protocol as `pipelines.recommend --evaluate` (pipelines/recommend/evaluation.py).

    python -m pipelines.paper.gnn_full_ranking --dataset citeseer --planetoid-dir ../shared/data/planetoid \\
        --models gcn,sage --seeds 0,1,2 --out gnn_full_ranking.json

Each (model, seed) trains once (pipelines/paper/gnn.py, a gnn_baselines config of common.presets.EXPERIMENT_PRESETS, dot
decoder: a score for every node is one matrix product), is kept at its best validation epoch of the
dataset's first protocol, and ranks every valid and test positive's target among all of its source's
rankable non-neighbours (not u, not a neighbour, not another known positive).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from common.atomic import write_json_atomic
from common.cli import Parser, command, exit_process, summary
from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.flags import (
    FlagError,
    add_dataset_flags,
    add_device_flag,
    add_seeds_flag,
    comma_list,
    experiment_preset_flag,
)
from common.presets import EXPERIMENT_PRESETS
from pipelines.core.config import parse_seeds
from pipelines.recommend.native_ranking import native_full_ranking

log = logging.getLogger("pipelines.paper.gnn_full_ranking")
MODELS = ("gcn", "sage")


PROG = "python -m pipelines.paper.gnn_full_ranking"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    add_dataset_flags(p, split=False, nodes=False)
    p.add_argument(
        "--preset",
        default="citeseer-small",
        help=f"GNN config: one of {', '.join(EXPERIMENT_PRESETS['gnn_baselines'])} (its dataset field is "
        "ignored; default citeseer-small)",
    )
    p.add_argument("--models", default="gcn,sage", help="comma-separated subset of gcn,sage (default both)")
    p.add_argument(
        "--inputs",
        default="features",
        choices=("features", "constant"),
        help="node features (default; citeseer/cora need --planetoid-dir) or a column of ones",
    )
    add_seeds_flag(p, "0,1,2")
    p.add_argument("--epochs", type=int, default=None, help="override the preset's epochs")
    add_device_flag(p)
    p.add_argument("--out", required=True, help="metrics .json (written atomically)")
    return p


def rank_splits(run: dict, dataset) -> dict:
    """Full-ranking metrics of a trained model on valid and test (each on its own split's graph)."""
    import torch

    from pipelines.paper.gnn import edge_index

    model, x = run["model"], run["inputs_tensor"]
    known = np.concatenate([dataset.splits[s].pos for s in ("valid", "test") if s in dataset.splits])
    out = {}
    for split in ("valid", "test"):
        graph = dataset.graph_for(split)
        with torch.no_grad():
            h = model.encode(x, edge_index(graph, x.device)).float()

        def score_rows(queries: np.ndarray, h: torch.Tensor = h) -> np.ndarray:
            with torch.no_grad():
                q = torch.from_numpy(queries).to(x.device)
                return (h[q] @ h.T).double().cpu().numpy()  # the dot decoder for every node at once

        out[split] = native_full_ranking(graph, np.asarray(dataset.splits[split].pos, np.int64), known, score_rows)
    return out


@dataclass(frozen=True)
class FullRankingConfig:
    name: str  # the GNN preset
    spec: dict
    source: DatasetSpec  # with its features under --inputs features
    models: tuple[str, ...]
    inputs: str  # features or constant
    seeds: tuple[int, ...]
    epochs: int | None
    device: str
    out: Path  # the metrics .json

    @classmethod
    def from_args(cls, args) -> "FullRankingConfig":
        spec = experiment_preset_flag("gnn_baselines", args.preset)
        return cls(
            args.preset,
            spec,
            DatasetSpec.from_args(args, features=args.inputs == "features"),
            tuple(comma_list(args.models, "--models", allowed=MODELS)),
            args.inputs,
            parse_seeds(args.seeds),
            args.epochs,
            args.device,
            Path(args.out),
        )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, run_full_ranking, argv, prog, config=FullRankingConfig.from_args)


def run_full_ranking(cfg: FullRankingConfig) -> int:
    from pipelines.paper.gnn import GNNConfig, fit

    features = cfg.inputs == "features"
    try:
        ds = load_dataset(cfg.source)
    except DatasetError as err:
        raise FlagError(f"--dataset {cfg.source.dataset} / --planetoid-dir: {err}") from None
    gnn = GNNConfig(decoder="dot", use_features=features, **cfg.spec["gnn"])
    if cfg.epochs:
        gnn = replace(gnn, epochs=cfg.epochs)
    report = {"dataset": ds.name, "preset": cfg.name, "config": gnn.to_dict(), "runs": []}
    for model in cfg.models:
        for seed in cfg.seeds:
            run = fit(ds, replace(gnn, encoder=model), ds.protocols[:1], seed, cfg.device, keep_model=True)
            ranked = rank_splits(run, ds)
            best = run["protocols"][ds.protocols[0]]["best_epoch"]
            report["runs"].append(
                {"model": model, "seed": seed, "best_epoch": best, "train_time_s": run["train_time_s"], **ranked}
            )
            log.info(
                "%s seed %d (epoch %d): test full-ranking Hits@20 %.4f MRR %.4f",
                model,
                seed,
                best,
                ranked["test"]["hits@20"],
                ranked["test"]["mrr"],
            )
    write_json_atomic(cfg.out, report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    exit_process(main)
