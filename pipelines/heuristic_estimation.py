"""Pairwise heuristic estimation (paper Section "Estimating Pairwise Heuristics" and appendix "Pairwise
Heuristic Estimation"), GNN side: RMSE by heuristic and depth for GCN, GAT, SAGE and their ID-GNN variants,
each model seeing only the candidate's sampled subgraph.

    python -m pipelines.heuristic_estimation --preset citeseer-small --seeds 0,1,2          # CPU size
    python -m pipelines.heuristic_estimation --preset cora --planetoid-dir ../shared/data/planetoid

Task (as the paper): candidates are the training positives plus one uniform non-edge per positive; the
valid / test candidates are the split's positives and its original-protocol negatives. Each candidate's
target is its heuristic on the FULL graph (every split's positives), normalised by common.heuristic_targets
with statistics fitted on the training candidates. Each candidate's (d, n) subgraph is sampled once on the
training graph with this project's sampler (preprocess.sampler) and its induced edges recovered with
common.induce, the target edge removed, exactly what PENCIL reads; GNN inputs are all ones (plus u / v
markers for ID-GNN). Test RMSE at the best validation RMSE.

PENCIL's rows need two hooks this recipe does not own: preprocess writing the normalised target as each
link's `label`, and the trainer's evaluation reporting RMSE for task = regression (see the report notes).
Writes OUT/heuristic_estimation/<preset>/: results.json, report.md, heuristic_rmse.png.
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from common.cli import add_debug_flag, one_line_errors, run_cli
from common.heuristic_targets import TARGETS, fit, full_graph, raw_scores, transform
from pipelines.plots import save_figure
from pipelines.report import mean_std, publish_results, table_json

log = logging.getLogger("pipelines.heuristic_estimation")
MODELS = ("gcn", "sage", "gat", "gcn-id", "sage-id", "gat-id")
LABEL = {"gcn": "GCN", "sage": "GraphSAGE", "gat": "GAT"}

# Paper (Table "Hyperparameter configurations ... pairwise heuristic estimation"): (2, 20), GNN hidden 512,
# batch 2048, lr 2e-4, weight decay 0.01; 200 epochs (700 for Katz and SPD). CPU size: smaller everything.
HE_PRESETS = {
    "cora": dict(dataset="cora", sampling=(2, 20), depths=(1, 2, 3, 4), heuristics=TARGETS, models=MODELS,
                 gnn=dict(hidden=512, epochs=200, lr=2e-4, weight_decay=0.01, batch_size=2048, eval_every=10,
                          dropout=0.0, heads=4), long_epochs=700),
    "citeseer": dict(dataset="citeseer", sampling=(2, 20), depths=(1, 2, 3, 4), heuristics=TARGETS, models=MODELS,
                     gnn=dict(hidden=512, epochs=200, lr=2e-4, weight_decay=0.01, batch_size=2048, eval_every=10,
                              dropout=0.0, heads=4), long_epochs=700),
    "citeseer-small": dict(dataset="citeseer", sampling=(2, 5), depths=(1, 2, 3), heuristics=("cn", "spd", "pr"),
                           models=("gcn", "gcn-id"),
                           gnn=dict(hidden=64, epochs=10, lr=2e-3, weight_decay=0.01, batch_size=256, eval_every=2,
                                    dropout=0.0, heads=2), long_epochs=10),
    "tiny": dict(dataset="citeseer", sampling=(1, 5), depths=(1, 2), heuristics=("cn", "spd"), models=("gcn", "gcn-id"),
                 gnn=dict(hidden=16, epochs=1, lr=1e-3, weight_decay=0.0, batch_size=512, eval_every=1, dropout=0.0,
                          heads=2), long_epochs=1),
}


class EstimationError(ValueError):
    """A bad pipelines.heuristic_estimation flag; the message names it and the fix."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipelines.heuristic_estimation", description=__doc__.splitlines()[0])
    p.add_argument("--preset", required=True, help=f"one of {', '.join(HE_PRESETS)}")
    p.add_argument("--heuristics", default=None, help=f"comma-separated subset of {','.join(TARGETS)} (default: the preset's)")
    p.add_argument("--models", default=None, help=f"comma-separated subset of {','.join(MODELS)} (default: the preset's)")
    p.add_argument("--depths", default=None, help="comma-separated layer counts (default: the preset's)")
    p.add_argument("--seeds", default="0,1,2", help="training seeds (default 0,1,2)")
    p.add_argument("--epochs", type=int, default=None, help="override the preset's epochs (all heuristics)")
    p.add_argument("--out", default="results", help="results root; this writes OUT/heuristic_estimation/<preset>/")
    p.add_argument("--device", default=None, choices=("cpu", "cuda"), help="default: cuda when available")
    p.add_argument("--planetoid-dir", default=None, help="Planetoid raw files (cora)")
    add_debug_flag(p)
    return one_line_errors(p)


def _list(text: str | None, default, flag: str, allowed=None, cast=str, minimum: int = 0) -> list:
    if text is None:
        return list(default)
    try:
        values = list(dict.fromkeys(cast(t.strip()) for t in text.split(",") if t.strip()))
    except ValueError:
        values = []
    bad = [v for v in values if allowed is not None and v not in allowed]
    if bad or not values or (cast is int and min(values) < minimum):
        raise EstimationError(f"--{flag}: expected a comma-separated subset of "
                              f"{','.join(map(str, allowed)) if allowed else f'integers >= {minimum}'}, got '{text}'")
    return values


# ---------------------------------------------------------------------------- data
def candidates(ds, seed: int) -> dict[str, np.ndarray]:
    """{split: (M, 2) pairs}: train = positives + one uniform non-edge each; valid / test = pos + negatives."""
    from common.datasets.edgelist import sample_non_edges

    pos = ds.graph.edge_array()
    neg = sample_non_edges(ds.graph, len(pos), np.random.default_rng([seed, 7]), what="training negatives")
    out = {"train": np.concatenate([pos, neg])}
    for split in ("valid", "test"):
        sp = ds.splits[split]
        out[split] = np.concatenate([sp.pos, sp.negatives("original").reshape(-1, 2)])
    return out


def subgraphs(ds, pairs: dict, sampling: tuple[int, int], seed: int) -> dict:
    """{split: (node_ptr, edge_ptr, edges)} of every candidate, sampled on the training graph."""
    from common.induce import Inducer
    from preprocess.sampler import derive_seed, sample_subgraphs

    g = ds.graph
    inducer = Inducer(g.indptr, g.indices)
    out = {}
    for split, p in pairs.items():
        sub = sample_subgraphs(g.indptr, g.indices, p[:, 0], p[:, 1], *sampling, derive_seed(seed, split))
        edge_ptr, edges = inducer.edges(sub.node_ptr, sub.nodes)
        out[split] = (sub.node_ptr, edge_ptr, edges)
    return out


def targets(ds, pairs: dict, name: str) -> tuple[dict, dict]:
    """Normalised targets per split (full graph, statistics fitted on the training candidates)."""
    full = full_graph(ds.num_nodes, *(ds.splits[s].pos for s in ("train", "valid", "test")))
    raw = {split: raw_scores(name, full, p) for split, p in pairs.items()}
    stats = fit(name, raw["train"], full if name == "spd" else None)
    return {split: transform(stats, r) for split, r in raw.items()}, stats.to_dict()


def batches(sub: tuple, target: np.ndarray, batch_size: int, device) -> list:
    from trainer.gnn import subgraph_batch

    node_ptr, edge_ptr, edges = sub
    out = []
    for s in range(0, len(target), batch_size):
        e = min(s + batch_size, len(target))
        out.append(subgraph_batch(node_ptr[s:e + 1], edge_ptr[s:e + 1] - edge_ptr[s],
                                  edges[edge_ptr[s]:edge_ptr[e]], target[s:e], device))
    return out


# ---------------------------------------------------------------------------- report
def model_label(model: str) -> str:
    base, _, idv = model.partition("-")
    return f"ID-{LABEL[base]}" if idv else LABEL[base]


def markdown(rows: list[dict], heuristics: list[str], depths: list[int], dataset: str) -> str:
    lines = [f"Pairwise heuristic estimation on {dataset}: test RMSE (normalised targets) at the best validation "
             "RMSE, mean ± std over seeds; rows model, columns depth", ""]
    for h in heuristics:
        lines += [f"**{h.upper()}**", "", "| model | " + " | ".join(f"{k} layer(s)" for k in depths) + " |",
                  "|---|" + "---|" * len(depths)]
        for m in dict.fromkeys(r["model"] for r in rows):
            cells = []
            for k in depths:
                got = next((r["rmse"] for r in rows if r["model"] == m and r["heuristic"] == h and r["layers"] == k), None)
                cells.append(f"{got[0]:.4f} ± {got[1]:.4f}" if got else "–")
            lines.append(f"| {model_label(m)} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["The paper shows these as figures only (no digits): ID-GNNs cut local-heuristic error within two layers;",
              "depth helps Katz / SPD; PageRank stays hard for MPNNs; PENCIL is below every GNN at every depth.",
              "PENCIL rows are not produced here: they need preprocess to write the normalised target as each link's",
              "label and the trainer to report RMSE for task = regression (hooks owned by the data-path modules)."]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], heuristics: list[str], path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(heuristics), figsize=(4 * len(heuristics), 3.5), squeeze=False)
    for ax, h in zip(axes[0], heuristics):
        for m in dict.fromkeys(r["model"] for r in rows):
            pts = sorted((r["layers"], r["rmse"]) for r in rows if r["model"] == m and r["heuristic"] == h)
            ax.errorbar([k for k, _ in pts], [v[0] for _, v in pts], yerr=[v[1] for _, v in pts], marker="o",
                        capsize=3, label=model_label(m))
        ax.set(title=h.upper(), xlabel="layers", ylabel="test RMSE")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


# ---------------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv, prog="pipelines.heuristic_estimation")


def _main(argv: list[str] | None = None) -> int:
    import torch

    from common.datasets import load_dataset
    from trainer.gnn import GNNConfig, fit_regression

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.preset not in HE_PRESETS:
        raise EstimationError(f"--preset: unknown '{args.preset}'; choose one of {', '.join(HE_PRESETS)}")
    spec = HE_PRESETS[args.preset]
    heuristics = _list(args.heuristics, spec["heuristics"], "heuristics", TARGETS)
    models = _list(args.models, spec["models"], "models", MODELS)
    depths = _list(args.depths, spec["depths"], "depths", cast=int, minimum=1)
    seeds = _list(args.seeds, [0], "seeds", cast=int)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    ds = load_dataset(spec["dataset"], planetoid_dir=args.planetoid_dir)
    out = Path(args.out) / "heuristic_estimation" / args.preset
    t0 = time.perf_counter()
    pairs = candidates(ds, seed=0)  # one candidate set and one set of subgraphs for every model and seed
    subs = subgraphs(ds, pairs, spec["sampling"], seed=0)
    log.info("%s: %s candidates, sampled in %.1fs", ds.name, {k: len(v) for k, v in pairs.items()}, time.perf_counter() - t0)
    runs = []
    for h in heuristics:
        tgt, stats = targets(ds, pairs, h)
        data = {split: batches(subs[split], tgt[split], spec["gnn"]["batch_size"], device) for split in pairs}
        epochs = args.epochs or (spec["long_epochs"] if h in ("katz", "spd") else spec["gnn"]["epochs"])
        for model in models:
            base, _, idv = model.partition("-")
            for layers in depths:
                cfg = replace(GNNConfig(encoder=base, layers=layers, **spec["gnn"]), epochs=epochs)
                for seed in seeds:
                    r = fit_regression(cfg, bool(idv), data["train"], data["valid"], data["test"], seed)
                    runs.append({"heuristic": h, "model": model, "layers": layers, "seed": seed, "stats": stats, **r})
                    log.info("%s %s %d layer(s) seed %d: test RMSE %.4f (best epoch %s)", h, model_label(model),
                             layers, seed, r["test_rmse"], r["best_epoch"])
    rows = []
    for key in dict.fromkeys((r["heuristic"], r["model"], r["layers"]) for r in runs):
        vals = [r["test_rmse"] for r in runs if (r["heuristic"], r["model"], r["layers"]) == key]
        rows.append({"heuristic": key[0], "model": key[1], "layers": key[2], "seeds": len(vals), "rmse": mean_std(vals)})
    md = markdown(rows, heuristics, depths, ds.name)
    png = plot(rows, heuristics, out / "heuristic_rmse.png")
    publish_results(out, {"preset": args.preset, "spec": {**spec, "sampling": list(spec["sampling"])}, "runs": runs,
                          "table": table_json(rows)}, md, png)
    log.info("heuristic estimation took %.0f s", time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
