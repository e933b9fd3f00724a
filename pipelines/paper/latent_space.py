"""Link prediction on latent-space graphs (paper appendix "Link Prediction on Latent Space Graphs"), one
command: the (s, mu) grid, CN / AA / GCN / GAT / PENCIL, tables in the paper's layout beside its numbers.

    python -m pipelines.paper.latent_space --preset latent-space-small --seeds 0,1,2       # CPU size
    python -m pipelines.paper.latent_space --preset latent-space --seeds 0,1,2             # paper size (N = 5000)

Graphs (common.datasets.synthetic): N nodes, K = d_latent = 3, p = 32, beta = 2, noise 0.5, alpha fitted to
average degree 15; 90 % of the edges train (5 % of them held out for validation), 10 % test; evaluation is
balanced, each split's negatives being as many non-edges far apart in latent space. One graph per (s, mu)
(--graph-seed), the training seeds vary the models. Settings: s in {0, 1, 2} at mu = 1 plus (2, 0), and
mu in {0, 2, 8} at s = 1 plus (0, 8). Every neural model has 2 layers at the preset's hidden size and uses
the node features. PENCIL goes through the usual preprocess -> shards -> trainer path (the generated
dataset object is handed to the preprocess job, features ride with the shards); GCN / GAT through
pipelines/paper/gnn.py; CN / AA through common.heuristics. Test MRR at the best validation epoch.

Writes OUT/latent_space/<preset>/: per-run result.json files, results.json, report.md, latent_space.png.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from common.atomic import write_json_atomic
from common.cli import Parser, command, exit_process, summary
from common.datasets import DatasetSpec
from common.flags import (
    FlagError,
    add_device_flag,
    add_num_cpus_flag,
    add_seeds_flag,
    add_shards_flag,
    add_train_arg_flag,
    comma_list,
    experiment_preset_flag,
)
from common.heuristics import score_split
from common.presets import EXPERIMENT_PRESETS, get_preset
from pipelines.core.config import ShardOptions, TrainerOptions, parse_seeds
from pipelines.core.paper_numbers import PAPER_LATENT
from pipelines.core.plots import save_figure
from pipelines.core.results import mean_std, publish_results
from pipelines.core.seeds import SeedFlagsError, check_trainer_flags, seed_run, train_seeds
from pipelines.core.shard_sets import build_shard_set, shutdown_embedded_ray

log = logging.getLogger("pipelines.paper.latent_space")
MODELS = ("CN", "AA", "GCN", "GAT", "PENCIL")
# The paper's two tables: column settings (s, mu) and test MRR per model.
TABLES = {"vary_s": [(0, 1), (1, 1), (2, 1), (2, 0)], "vary_mu": [(1, 0), (1, 2), (1, 8), (0, 8)]}


def settings(tables: list[str]) -> list[tuple[float, float]]:
    """Distinct (s, mu) settings the tables need, in table order ((1, 1) is in both tables)."""
    return list(dict.fromkeys(sm for t in tables for sm in TABLES[t]))


def dataset_name(s: float, mu: float) -> str:
    return f"latent_s{s:g}_mu{mu:g}"


PROG = "python -m pipelines.paper.latent_space"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument(
        "--preset", required=True, help=f"one of {', '.join(EXPERIMENT_PRESETS['latent_space'])} (common/presets.py)"
    )
    p.add_argument("--tables", default="vary_s,vary_mu", help="comma-separated subset of vary_s,vary_mu")
    p.add_argument(
        "--settings",
        default=None,
        metavar="S:MU,...",
        help="only these (s, mu) settings of the tables, e.g. 2:1,1:8 (default: all of them)",
    )
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {','.join(MODELS)}")
    add_seeds_flag(p, "0,1,2")
    p.add_argument("--graph-seed", type=int, default=0, help="seed of the generated graphs (default 0)")
    p.add_argument("--num-nodes", type=int, default=None, help="override the preset's graph size")
    p.add_argument("--out", default="results", help="results root; this writes OUT/latent_space/<preset>/")
    add_shards_flag(p)
    add_device_flag(p)
    add_num_cpus_flag(p)
    add_train_arg_flag(p)
    return p


@dataclass(frozen=True)
class LatentConfig:
    name: str  # the experiment preset
    spec: dict  # its settings (common.presets.EXPERIMENT_PRESETS["latent_space"])
    tables: tuple[str, ...]
    settings: tuple[tuple[int, int], ...]  # the (s, mu) graphs to run
    models: tuple[str, ...]
    seeds: tuple[int, ...]
    graph_seed: int
    num_nodes: int
    out: Path  # OUT/latent_space/<preset>
    trainer: TrainerOptions
    shards: ShardOptions

    @classmethod
    def from_args(cls, args) -> "LatentConfig":
        spec = experiment_preset_flag("latent_space", args.preset)
        tables = comma_list(args.tables, "--tables", allowed=list(TABLES))
        num_nodes = args.num_nodes or spec["num_nodes"]
        if num_nodes < 50:
            raise FlagError(
                f"--num-nodes: need at least 50 nodes for a 90/10 split with average degree 15, got {num_nodes}"
            )
        grid = settings(tables)
        return cls(
            args.preset,
            spec,
            tuple(tables),
            tuple(parse_settings(args.settings, grid) if args.settings else grid),
            tuple(comma_list(args.models, "--models", allowed=list(MODELS))),
            parse_seeds(args.seeds),
            args.graph_seed,
            num_nodes,
            Path(args.out) / "latent_space" / args.preset,
            TrainerOptions.from_args(args),
            ShardOptions.from_args(args),
        )


def parse_settings(text: str, grid: list[tuple]) -> list[tuple]:
    """'2:1,1:8' -> [(2, 1), (1, 8)], each one of the tables' settings."""
    try:
        chosen = [tuple(int(v) for v in item.split(":")) for item in text.split(",") if item.strip()]
    except ValueError:
        chosen = []
    bad = [c for c in chosen if c not in grid]
    if bad or not chosen:
        raise FlagError(f"--settings: expected S:MU pairs among {','.join(f'{s}:{m}' for s, m in grid)}, got '{text}'")
    return list(dict.fromkeys(chosen))


# ---------------------------------------------------------------------------- the three kinds of model
def heuristic_records(ds, sm, models: list[str]) -> list[dict]:
    names = [m.lower() for m in models if m in ("CN", "AA")]
    if not names:
        return []
    scored = score_split(ds, "test", ["original"], names)["original"]
    return [{"setting": list(sm), "model": n.upper(), "seed": 0, "test": scored[n]} for n in names]


def gnn_records(ds, sm, models: list[str], gnn: dict, seeds: list[int], device: str, out: Path) -> list[dict]:
    from pipelines.paper.gnn import GNNConfig, fit

    records = []
    for model in (m for m in models if m in ("GCN", "GAT")):
        cfg = GNNConfig(encoder=model.lower(), decoder="mlp", use_features=True, **gnn)
        for seed in seeds:
            best = fit(ds, cfg, ["original"], seed, device)["protocols"]["original"]
            rec = {
                "setting": list(sm),
                "model": model,
                "seed": seed,
                "best_epoch": best["best_epoch"],
                "valid": best["valid"],
                "test": best["test"],
            }
            write_json_atomic(out / dataset_name(*sm) / model.lower() / f"seed{seed}" / "result.json", rec)
            records.append(rec)
    return records


def pencil_shards(opts: ShardOptions, preset, datasets: dict) -> dict:
    """One shard set per setting, all built while one embedded Ray is up (the job takes the dataset
    object itself, node features included)."""
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig

    shards = {}
    for sm, ds in datasets.items():
        cfg = PreprocessConfig(
            data=DatasetSpec("synthetic", features=True),
            sampling=SamplingConfig(*preset.sampling),
            out=opts.root,
            candidates=CandidateConfig(
                views=max(1, min(20, int(round(preset.epochs)))), percent=preset.train_percent, protocols=("original",)
            ),
            num_cpus=opts.num_cpus,
        )
        shards[sm] = build_shard_set(cfg, ds, keep_ray=True)
    shutdown_embedded_ray()  # free the embedded Ray's CPUs before training
    return shards


def pencil_records(opts: TrainerOptions, preset, sm, shards: str, seeds: tuple[int, ...], out: Path) -> list[dict]:
    records = []
    runs = {seed: out / dataset_name(*sm) / "pencil" / f"seed{seed}" for seed in seeds}
    summaries = train_seeds(
        opts, {seed: seed_run(opts, preset.name, shards, "original", seed, run_dir) for seed, run_dir in runs.items()}
    )  # seeds in parallel on CPU
    for seed, run_dir in runs.items():
        summary = summaries[seed]
        rec = {
            "setting": list(sm),
            "model": "PENCIL",
            "seed": seed,
            "best_epoch": summary.best_epoch,
            "valid": summary.valid or {},
            "test": summary.test or {},
        }
        write_json_atomic(run_dir / "result.json", rec)
        records.append(rec)
    return records


# ---------------------------------------------------------------------------- report
def summarise(records: list[dict]) -> dict:
    """{(s, mu): {model: (mean, std) of test MRR in %}}."""
    out: dict = {}
    for r in records:
        out.setdefault(tuple(r["setting"]), {}).setdefault(r["model"], []).append(100 * r["test"]["mrr"])
    return {sm: {m: mean_std(v) for m, v in by.items()} for sm, by in out.items()}


def markdown(summary: dict, tables: list[str], models: list[str], num_nodes: int) -> str:
    lines = []
    for t in tables:
        cols = TABLES[t]
        lines += [
            f"Test MRR (%) on latent-space graphs, {'varying s (mu = 1)' if t == 'vary_s' else 'varying mu (s = 1)'}"
            f" plus the edge case; N = {num_nodes}; measured (mean ± std over seeds) / paper",
            "",
            "| model | " + " | ".join(f"(s={s:g}, mu={mu:g})" for s, mu in cols) + " |",
            "|---|" + "---|" * len(cols),
        ]
        for m in models:
            cells = []
            for i, sm in enumerate(cols):
                got = summary.get(sm, {}).get(m)
                cells.append(
                    f"{got[0]:.2f} ± {got[1]:.2f} / {PAPER_LATENT[t][m][i]:.2f}"
                    if got
                    else f"– / {PAPER_LATENT[t][m][i]:.2f}"
                )
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append("CN / AA of the paper depend on its random graphs: compare orderings between models, not digits.")
    return "\n".join(lines) + "\n"


def plot(summary: dict, tables: list[str], models: list[str], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tables), figsize=(6 * len(tables), 4), squeeze=False)
    for ax, t in zip(axes[0], tables):
        cols = TABLES[t]
        for m in models:
            vals = [summary.get(sm, {}).get(m, (float("nan"), 0.0)) for sm in cols]
            line = ax.errorbar(
                range(len(cols)), [v[0] for v in vals], yerr=[v[1] for v in vals], marker="o", capsize=3, label=m
            )
            ax.plot(range(len(cols)), PAPER_LATENT[t][m], ls=":", color=line[0].get_color())
        ax.set_xticks(range(len(cols)), [f"s={s:g}, mu={mu:g}" for s, mu in cols], fontsize=8)
        ax.set(ylabel="test MRR (%)", title=f"{t}: measured (solid) vs paper (dotted)")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


# ---------------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, run_latent_space, argv, prog, config=LatentConfig.from_args)


def run_latent_space(cfg: LatentConfig) -> int:
    from common.datasets.synthetic import LatentSpace, load_latent_space

    preset = get_preset(cfg.spec["pencil"])
    if "PENCIL" in cfg.models:
        try:
            check_trainer_flags(cfg.trainer, preset.name, ["original"], cfg.out)
        except SeedFlagsError as err:
            raise FlagError(str(err)) from None
    datasets = {}
    for s, mu in cfg.settings:
        ds = load_latent_space(cfg.graph_seed, LatentSpace(num_nodes=cfg.num_nodes, s=float(s), mu=float(mu)))
        datasets[(s, mu)] = replace(ds, name=dataset_name(s, mu))
        log.info("%s", datasets[(s, mu)].summary())
    shards = pencil_shards(cfg.shards, preset, datasets) if "PENCIL" in cfg.models else {}
    records, models = [], list(cfg.models)
    for sm, ds in datasets.items():
        records += heuristic_records(ds, sm, models)
        records += gnn_records(ds, sm, models, cfg.spec["gnn"], list(cfg.seeds), cfg.trainer.device, cfg.out)
        if "PENCIL" in cfg.models:
            records += pencil_records(cfg.trainer, preset, sm, shards[sm], cfg.seeds, cfg.out)
    summary = summarise(records)
    md = markdown(summary, list(cfg.tables), models, cfg.num_nodes)
    png = plot(summary, list(cfg.tables), models, cfg.out / "latent_space.png")
    payload = {
        "preset": cfg.name,
        "num_nodes": cfg.num_nodes,
        "graph_seed": cfg.graph_seed,
        "seeds": list(cfg.seeds),
        "gnn": cfg.spec["gnn"],
        "pencil_preset": preset.to_dict(),
        "runs": records,
        "table": [
            {"setting": list(sm), "model": m, "mrr": list(v)} for sm, by in summary.items() for m, v in by.items()
        ],
        "paper": {t: {"settings": [list(x) for x in TABLES[t]], "mrr": PAPER_LATENT[t]} for t in cfg.tables},
    }
    publish_results(cfg.out, payload, md, png)
    return 0


if __name__ == "__main__":
    exit_process(main)
