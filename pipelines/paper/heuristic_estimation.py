"""Pairwise heuristic estimation (paper Section "Estimating Pairwise Heuristics" and appendix "Pairwise
Heuristic Estimation"): RMSE by heuristic and depth for PENCIL and for GCN, GAT, SAGE and their ID-GNN
variants, every model seeing only the candidate's sampled subgraph.

    python -m pipelines.paper.heuristic_estimation --preset citeseer-small --seeds 0,1,2          # CPU size
    python -m pipelines.paper.heuristic_estimation --preset cora-small --planetoid-dir ../shared/data/planetoid
    python -m pipelines.paper.heuristic_estimation --preset cora --planetoid-dir ../shared/data/planetoid

One shard set per heuristic, from the project's own path: `preprocess --targets NAME` samples the usual
candidates (training positives plus one uniform non-edge each, per view; the valid / test positives and
their original-protocol negatives) and labels each with its heuristic on the FULL graph, normalised by
common.heuristic_targets with statistics fitted on the training candidates (preprocess/targets.py).
PENCIL trains on that set with the ordinary trainer (task = regression: MSE, lowest validation RMSE
selects). The GNNs read the very same blocks: the same subgraphs (induced edges recovered with
common.induce, target edge removed), the same targets; training view 0 only, all-ones inputs (plus u / v
markers for ID-GNN). Test RMSE at the best validation RMSE for every model.

Writes OUT/heuristic_estimation/<preset>/: pencil/<heuristic>/layers<k>/seed<s>/ (trainer runs),
results.json, report.md, heuristic_rmse.png.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from common.cli import Parser, command, exit_process, summary
from common.datasets import DatasetSpec
from common.flags import (
    add_dataset_flags,
    add_device_flag,
    add_num_cpus_flag,
    add_seeds_flag,
    add_shards_flag,
    comma_list,
    experiment_preset_flag,
)
from common.heuristic_targets import TARGETS
from common.manifest_record import Manifest
from common.presets import EXPERIMENT_PRESETS
from pipelines.core.config import ShardOptions, TrainerOptions, parse_seeds
from pipelines.core.plots import save_figure
from pipelines.core.results import mean_std, publish_results, table_json
from pipelines.core.seeds import seed_run, train_seeds
from pipelines.core.shard_sets import build_shard_set

log = logging.getLogger("pipelines.paper.heuristic_estimation")
MODELS = ("pencil", "gcn", "sage", "gat", "gcn-id", "sage-id", "gat-id")
LABEL = {"pencil": "PENCIL", "gcn": "GCN", "sage": "GraphSAGE", "gat": "GAT"}


PROG = "python -m pipelines.paper.heuristic_estimation"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument(
        "--preset",
        required=True,
        help=f"one of {', '.join(EXPERIMENT_PRESETS['heuristic_estimation'])} (common/presets.py)",
    )
    p.add_argument(
        "--heuristics", default=None, help=f"comma-separated subset of {','.join(TARGETS)} (default: the preset's)"
    )
    p.add_argument(
        "--models", default=None, help=f"comma-separated subset of {','.join(MODELS)} (default: the preset's)"
    )
    p.add_argument("--depths", default=None, help="comma-separated layer counts (default: the preset's)")
    add_seeds_flag(p, "0,1,2")
    p.add_argument("--epochs", type=int, default=None, help="override the preset's epochs (all heuristics)")
    p.add_argument("--out", default="results", help="results root; this writes OUT/heuristic_estimation/<preset>/")
    add_shards_flag(p)
    add_device_flag(p)
    add_num_cpus_flag(p)
    add_dataset_flags(p, required=False, split=False, nodes=False)
    return p


@dataclass(frozen=True)
class EstimationConfig:
    name: str  # the experiment preset
    spec: dict  # its settings (common.presets.EXPERIMENT_PRESETS["heuristic_estimation"])
    heuristics: tuple[str, ...]
    models: tuple[str, ...]
    depths: tuple[int, ...]
    seeds: tuple[int, ...]
    epochs: int | None  # None: the preset's per heuristic
    out: Path  # OUT/heuristic_estimation/<preset>
    planetoid_dir: str | None
    trainer: TrainerOptions
    shards: ShardOptions

    @classmethod
    def from_args(cls, args) -> "EstimationConfig":
        spec = experiment_preset_flag("heuristic_estimation", args.preset, args.dataset)
        pick = lambda text, flag, default, **kw: tuple(default if text is None else comma_list(text, flag, **kw))
        return cls(
            args.preset,
            spec,
            pick(args.heuristics, "--heuristics", spec["heuristics"], allowed=TARGETS),
            pick(args.models, "--models", spec["models"], allowed=MODELS),
            pick(args.depths, "--depths", spec["depths"], cast=int, minimum=1),
            parse_seeds(args.seeds),
            args.epochs,
            Path(args.out) / "heuristic_estimation" / args.preset,
            args.planetoid_dir,
            TrainerOptions.from_args(args),
            ShardOptions.from_args(args),
        )


# ---------------------------------------------------------------------------- data
def target_shards(cfg: EstimationConfig, heuristic: str) -> str:
    """The shard set of one heuristic (built, or found in the cache): links labelled with its targets."""
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig

    spec = cfg.spec
    job = PreprocessConfig(
        data=DatasetSpec(spec["dataset"], planetoid_dir=cfg.planetoid_dir),
        sampling=SamplingConfig(*spec["sampling"]),
        candidates=CandidateConfig(views=spec["views"], protocols=("original",)),
        targets=heuristic,
        out=cfg.shards.root,
        num_cpus=cfg.shards.num_cpus,
    )
    return build_shard_set(job)


def shard_subgraphs(manifest: Manifest, split: str) -> tuple[tuple, np.ndarray]:
    """((node_ptr, edge_ptr, edges), targets) of every link of a split (training: view 0), read from the
    shards with the edges recovered on the graph they were sampled on (target edge removed)."""
    from common.induce import Inducer
    from common.shards import Block, iter_tar_blocks, load_graph, set_graph, shard_entries
    from trainer.data.block_stream import open_url

    entries = shard_entries(manifest, split, **({"view": 0} if split == "train" else {"protocol": "original"}))
    blocks = []
    for e in entries:
        url = f"{manifest.root}/{e['name']}"
        with open_url(url) as f:
            blocks += list(iter_tar_blocks(f, url))
    block = Block.concat(blocks)
    edge_ptr, edges = Inducer(*load_graph(manifest, set_graph(manifest, split))).edges(block.node_ptr, block.nodes)
    return (block.node_ptr, edge_ptr, edges), block.label


def batches(sub: tuple, target: np.ndarray, batch_size: int, device) -> list:
    from pipelines.paper.gnn import subgraph_batch

    node_ptr, edge_ptr, edges = sub
    out = []
    for s in range(0, len(target), batch_size):
        e = min(s + batch_size, len(target))
        out.append(
            subgraph_batch(
                node_ptr[s : e + 1],
                edge_ptr[s : e + 1] - edge_ptr[s],
                edges[edge_ptr[s] : edge_ptr[e]],
                target[s:e],
                device,
            )
        )
    return out


# ---------------------------------------------------------------------------- runs
def gnn_runs(
    spec: dict, models: list[str], depths: list[int], seeds: list[int], manifest: Manifest, epochs: int, device
) -> list[dict]:
    from pipelines.paper.gnn import GNNConfig, fit_regression

    subs = {split: shard_subgraphs(manifest, split) for split in ("train", "valid", "test")}
    data = {split: batches(sub, tgt, spec["gnn"]["batch_size"], device) for split, (sub, tgt) in subs.items()}
    runs = []
    for model in models:
        base, _, idv = model.partition("-")
        for layers in depths:
            cfg = replace(GNNConfig(encoder=base, layers=layers, **spec["gnn"]), epochs=epochs)
            for seed in seeds:
                r = fit_regression(cfg, bool(idv), data["train"], data["valid"], data["test"], seed)
                runs.append({"model": model, "layers": layers, "seed": seed, **r})
    return runs


def pencil_runs(cfg: EstimationConfig, shards: str, epochs: int, out: Path) -> list[dict]:
    """PENCIL through the ordinary trainer, seeds as concurrent processes on CPU (pipelines.core.seeds)."""
    pen = dict(cfg.spec["pencil"])
    preset = pen.pop("preset")
    model = tuple(t for k, v in pen.items() for t in (f"--{k.replace('_', '-')}", str(v)))
    runs = []
    for layers in cfg.depths:
        dirs = {seed: out / f"layers{layers}" / f"seed{seed}" for seed in cfg.seeds}
        summaries = train_seeds(
            cfg.trainer,
            {
                seed: seed_run(
                    cfg.trainer,
                    preset,
                    shards,
                    "original",
                    seed,
                    d,
                    epochs=epochs,
                    overrides=(*model, "--layers", str(layers)),
                )
                for seed, d in dirs.items()
            },
        )
        for seed in cfg.seeds:
            sm = summaries[seed]
            runs.append(
                {
                    "model": "pencil",
                    "layers": layers,
                    "seed": seed,
                    "best_epoch": sm.best_epoch,
                    "valid_rmse": sm.valid["rmse"],
                    "test_rmse": sm.test["rmse"],
                    "num_parameters": sm.num_parameters,
                    "run_dir": str(dirs[seed]),
                }
            )
    return runs


# ---------------------------------------------------------------------------- report
def model_label(model: str) -> str:
    base, _, idv = model.partition("-")
    return f"ID-{LABEL[base]}" if idv else LABEL[base]


def markdown(rows: list[dict], heuristics: list[str], depths: list[int], dataset: str) -> str:
    lines = [
        f"Pairwise heuristic estimation on {dataset}: test RMSE (normalised targets) at the best validation "
        "RMSE, mean ± std over seeds; rows model, columns depth",
        "",
    ]
    for h in heuristics:
        lines += [
            f"**{h.upper()}**",
            "",
            "| model | " + " | ".join(f"{k} layer(s)" for k in depths) + " |",
            "|---|" + "---|" * len(depths),
        ]
        for m in dict.fromkeys(r["model"] for r in rows):
            cells = []
            for k in depths:
                got = next(
                    (r["rmse"] for r in rows if r["model"] == m and r["heuristic"] == h and r["layers"] == k), None
                )
                cells.append(f"{got[0]:.4f} ± {got[1]:.4f}" if got else "–")
            lines.append(f"| {model_label(m)} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "The paper shows these as figures only (no digits): ID-GNNs cut local-heuristic error within two layers;",
        "depth helps Katz / SPD; PageRank stays hard for MPNNs; PENCIL is below every GNN at every depth.",
        "Every model reads the same shard set per heuristic (same subgraphs, same normalised targets); the GNNs",
        "train on view 0 only, PENCIL on one view per epoch (as its link-prediction runs).",
    ]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], heuristics: list[str], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(heuristics), figsize=(4 * len(heuristics), 3.5), squeeze=False)
    for ax, h in zip(axes[0], heuristics):
        for m in dict.fromkeys(r["model"] for r in rows):
            pts = sorted((r["layers"], r["rmse"]) for r in rows if r["model"] == m and r["heuristic"] == h)
            ax.errorbar(
                [k for k, _ in pts],
                [v[0] for _, v in pts],
                yerr=[v[1] for _, v in pts],
                marker="o",
                capsize=3,
                label=model_label(m),
            )
        ax.set(title=h.upper(), xlabel="layers", ylabel="test RMSE")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


# ---------------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, run_estimation, argv, prog, config=EstimationConfig.from_args)


def run_estimation(cfg: EstimationConfig) -> int:
    import torch

    from common.shards import read_manifest

    spec, device_flag = cfg.spec, cfg.trainer.device
    device = torch.device(
        "cuda" if device_flag == "cuda" or (device_flag == "auto" and torch.cuda.is_available()) else "cpu"
    )
    t0 = time.perf_counter()
    runs = []
    for h in cfg.heuristics:
        shards = target_shards(cfg, h)
        manifest = read_manifest(shards)
        stats = manifest.targets
        epochs = cfg.epochs or (spec["long_epochs"] if h in ("katz", "spd") else spec["gnn"]["epochs"])
        gnns = [m for m in cfg.models if m != "pencil"]
        got = gnn_runs(spec, gnns, list(cfg.depths), list(cfg.seeds), manifest, epochs, device) if gnns else []
        if "pencil" in cfg.models:
            got += pencil_runs(cfg, shards, epochs, cfg.out / "pencil" / h)
        for r in got:
            runs.append({"heuristic": h, **r, "stats": stats})
            log.info(
                "%s %s %d layer(s) seed %d: test RMSE %.4f (best epoch %s)",
                h,
                model_label(r["model"]),
                r["layers"],
                r["seed"],
                r["test_rmse"],
                r["best_epoch"],
            )
    rows = []
    for key in dict.fromkeys((r["heuristic"], r["model"], r["layers"]) for r in runs):
        vals = [r["test_rmse"] for r in runs if (r["heuristic"], r["model"], r["layers"]) == key]
        rows.append(
            {"heuristic": key[0], "model": key[1], "layers": key[2], "seeds": len(vals), "rmse": mean_std(vals)}
        )
    md = markdown(rows, list(cfg.heuristics), list(cfg.depths), spec["dataset"])
    png = plot(rows, list(cfg.heuristics), cfg.out / "heuristic_rmse.png")
    publish_results(
        cfg.out,
        {
            "preset": cfg.name,
            "spec": {**spec, "sampling": list(spec["sampling"])},
            "runs": runs,
            "table": table_json(rows),
        },
        md,
        png,
    )
    log.info("heuristic estimation took %.0f s", time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    exit_process(main)
