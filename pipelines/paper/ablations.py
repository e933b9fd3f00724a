"""Ablations of the paper's appendix and depth table, one command: every variant x seed through the same
preprocess -> shards -> trainer path as `pipelines.run`, then one table beside the paper's numbers.

    python -m pipelines.paper.ablations --preset citeseer-ablate-small --seeds 0,1,2     # CPU size (~8 min, 2 cores)
    python -m pipelines.paper.ablations --preset cora --suite mr,w0,wpe,depth --seeds 0,1,2,3,4 --planetoid-dir …

Suites (variants share one shard set; the plain PENCIL run is shared by all suites):
  mr     PENCIL vs PENCIL \\ MR (no multiplicative residual)          appendix "Ablation Study on MR"
  w0     W0 orthogonal vs mean-shifted Gaussian vs low-rank (5), frozen; and a learnable W0
  wpe    + learnable word position embeddings                          appendix "Effects of ... Initialization"
  depth  --layers over --depths                                        main text "Effects of Model Depth"
  lrp    PENCIL + LRP-3: three labeled subgraphs per link, DeepSets-pooled   appendix "Effect of Multiple
                                                                       Labeled Subgraphs"

Writes OUT/ablations/<preset>/: <variant>/seed<k>/ (trainer runs, result.json), results.json,
report.md and ablations.png (test metric per variant; validation metric per epoch; metric vs depth).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from common.atomic import write_json_atomic
from common.cli import Parser, command, exit_process, summary
from common.datasets import DatasetSpec, load_dataset
from common.flags import (
    FlagError,
    add_dataset_flags,
    add_device_flag,
    add_num_cpus_flag,
    add_seeds_flag,
    add_shards_flag,
    add_train_arg_flag,
    comma_list,
)
from common.presets import Preset, get_preset
from pipelines.core.config import ShardOptions, TrainerOptions, parse_seeds
from pipelines.core.paper_numbers import PAPER_ABLATIONS, PAPER_CLAIMS
from pipelines.core.plots import run_metrics, save_figure
from pipelines.core.results import aggregate, fmt, publish_results, table_json
from pipelines.core.seeds import SeedFlagsError, check_trainer_flags, result_record, seed_run, train_seeds
from pipelines.core.shard_sets import preset_shard_set
from pipelines.core.trainers import device_kind

log = logging.getLogger("pipelines.paper.ablations")
SUITES = ("mr", "w0", "wpe", "depth", "lrp")
LRP_K = 3  # the paper's "PENCIL + LRP-3"
COLUMNS = ("mrr", "hits@3", "hits@20", "hits@50", "hits@100")
BASE = "PENCIL"


@dataclass(frozen=True)
class Variant:
    name: str  # row label, also used for the paper lookup
    slug: str  # run folder name
    flags: tuple[str, ...]  # trainer flags that make this variant
    layers: int  # depth of this variant (for the depth plot)


def variants(suites: list[str], preset_layers: int, depths: list[int]) -> list[Variant]:
    """The runs a suite list needs, the shared PENCIL run once and first."""
    out = [Variant(BASE, "pencil", (), preset_layers)]
    if "mr" in suites:
        out.append(Variant("PENCIL \\ MR", "no-mr", ("--no-residual",), preset_layers))
    if "w0" in suites:
        out += [
            Variant("W0 mean-shifted Gaussian", "w0-gaussian", ("--w0-init", "gaussian"), preset_layers),
            Variant("W0 low-rank (5)", "w0-low-rank", ("--w0-init", "low-rank"), preset_layers),
            Variant("W0 learnable", "w0-learnable", ("--w0-learnable",), preset_layers),
        ]
    if "wpe" in suites:
        out.append(Variant("PENCIL + WPE", "wpe", ("--wpe",), preset_layers))
    if "lrp" in suites:
        out.append(Variant(f"PENCIL + LRP-{LRP_K}", f"lrp{LRP_K}", ("--lrp", str(LRP_K)), preset_layers))
    if "depth" in suites:
        out += [
            Variant(f"PENCIL, {k} layer" + ("s" if k > 1 else ""), f"layers{k}", ("--layers", str(k)), k)
            for k in depths
            if k != preset_layers
        ]  # the preset's own depth is the PENCIL run
    return out


# ---------------------------------------------------------------------------- running
PROG = "python -m pipelines.paper.ablations"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--preset", required=True, help="base configuration: a preset of common/presets.py")
    p.add_argument(
        "--suite", default=",".join(SUITES), help=f"comma-separated subset of {','.join(SUITES)} (default all)"
    )
    p.add_argument("--depths", default=None, help="layers for the depth suite (default: 1,2,4 around the preset's)")
    add_seeds_flag(p, "0,1,2")
    p.add_argument("--out", default="results", help="results root; this writes OUT/ablations/<preset>/")
    add_shards_flag(p)
    p.add_argument("--epochs", type=float, default=None, help="override the preset's epochs")
    add_device_flag(p)
    add_num_cpus_flag(p)
    add_dataset_flags(p, required=False, split=False, nodes=False)
    add_train_arg_flag(p)
    return p


@dataclass(frozen=True)
class AblationConfig:
    preset: Preset
    suites: tuple[str, ...]
    depths: tuple[int, ...]
    seeds: tuple[int, ...]
    out: Path  # OUT/ablations/<preset>
    source: DatasetSpec  # the preset's dataset
    trainer: TrainerOptions
    shards: ShardOptions

    @classmethod
    def from_args(cls, args) -> "AblationConfig":
        try:
            preset = get_preset(args.preset)
        except ValueError as err:
            raise FlagError(f"--preset: {err}") from None
        if args.dataset and args.dataset != preset.dataset:
            raise FlagError(
                f"--dataset {args.dataset}: preset {preset.name} runs on {preset.dataset}; leave --dataset out"
            )
        suites = comma_list(args.suite, "--suite", allowed=SUITES)
        depths = (
            comma_list(args.depths, "--depths", int, minimum=1) if args.depths else sorted({1, 2, 4, preset.layers})
        )
        source = DatasetSpec.from_args(args, dataset=preset.dataset)
        trainer, shards = TrainerOptions.from_args(args), ShardOptions.from_args(args)
        return cls(
            preset,
            tuple(suites),
            tuple(depths),
            parse_seeds(args.seeds),
            Path(args.out) / "ablations" / preset.name,
            source,
            trainer,
            shards,
        )


def run_variant(cfg: AblationConfig, variant: Variant, shards: str) -> list[dict]:
    opts = variant_options(cfg, variant)
    runs = {
        seed: seed_run(opts, cfg.preset.name, shards, cfg.preset.protocol, seed, cfg.out / variant.slug / f"seed{seed}")
        for seed in cfg.seeds
    }
    summaries = train_seeds(opts, runs)  # seeds in parallel on CPU
    results = []
    for seed, run in runs.items():
        summary = summaries[seed]
        record = result_record(cfg.preset.dataset, cfg.preset.protocol, cfg.preset.name, seed, summary, False)
        record.update(
            model=variant.name,
            variant=variant.slug,
            layers=variant.layers,
            flags=list(variant.flags),
            selection_metric=summary.selection_metric,
        )
        write_json_atomic(Path(run.run_dir) / "result.json", record)
        results.append(record)
        log.info(
            "%s seed %d: test %s",
            variant.name,
            seed,
            {k: round(100 * v, 2) for k, v in record["test"].items() if k in COLUMNS},
        )
    return results


def variant_options(cfg: AblationConfig, variant: Variant) -> TrainerOptions:
    """The user's trainer flags, then the variant's."""
    return replace(cfg.trainer, train_args=(*cfg.trainer.train_args, *variant.flags))


# ---------------------------------------------------------------------------- reporting
def table(results: list[dict], dataset: str, suites: list[str]) -> tuple[list[dict], str]:
    """Rows (mean ± std over seeds per variant, in run order) and the Markdown beside the paper."""
    order = list(dict.fromkeys(r["model"] for r in results))
    rows = sorted(aggregate(results), key=lambda r: order.index(r["model"]))
    paper = PAPER_ABLATIONS.get(dataset, {})
    header = ["variant", "seeds", *COLUMNS, "paper"]
    lines = [
        f"Ablations on {dataset} (test at the best validation epoch, %, mean ± std over seeds)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]

    def paper_cell(name: str) -> str:
        ref = paper.get(name, {})
        return (
            "; ".join(
                f"{m.upper()} {mean:.2f}" + (f" ± {std:.2f}" if std is not None else "")
                for m, (mean, std) in ref.items()
            )
            or "–"
        )

    for row in rows:
        cells = [row["model"], str(len(row["seeds"]))] + [fmt(*row[m]) if m in row else "–" for m in COLUMNS]
        lines.append("| " + " | ".join(cells + [paper_cell(row["model"])]) + " |")
    for name in paper:
        if name not in order:  # paper rows with no measured twin (e.g. LRP-3)
            lines.append(
                "| " + " | ".join([f"{name} (paper only)", "–", *["–"] * len(COLUMNS), paper_cell(name)]) + " |"
            )
    lines += ["", "The paper's claims for what it shows only as figures:"]
    lines += [f"- {s}: {PAPER_CLAIMS[s]}" for s in suites]
    return rows, "\n".join(lines) + "\n"


def plot(results: list[dict], rows: list[dict], run_root: Path, path: Path, metric: str) -> Path:
    """Test metric per variant (bars), validation metric per epoch (mean over seeds), metric vs depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    depth = sorted({r["layers"] for r in results})
    fig, axes = plt.subplots(1, 3 if len(depth) > 1 else 2, figsize=(15 if len(depth) > 1 else 10, 4))
    names = [r["model"] for r in rows]
    means = [r.get(metric, (np.nan, 0))[0] for r in rows]
    stds = [r.get(metric, (np.nan, 0))[1] for r in rows]
    axes[0].barh(names, means, xerr=stds, color="tab:blue")
    axes[0].invert_yaxis()
    axes[0].set(xlabel=f"test {metric.upper()} (%)", title="Variants (mean ± std over seeds)")
    for row in rows:
        slug = next(r["variant"] for r in results if r["model"] == row["model"])
        curves = [
            [
                (e["epoch"], 100 * e[metric])
                for e in run_metrics(d)
                if e.get("event") == "eval" and e.get("split") == "valid" and metric in e
            ]
            for d in sorted((run_root / slug).glob("seed*"))
        ]
        curves = [c for c in curves if c]
        if curves:
            n = min(len(c) for c in curves)
            axes[1].plot(
                [e for e, _ in curves[0][:n]],
                np.mean([[v for _, v in c[:n]] for c in curves], axis=0),
                marker="o",
                markersize=3,
                label=row["model"],
            )
    axes[1].set(xlabel="epoch", ylabel=f"valid {metric.upper()} (%)", title="Validation per epoch (mean over seeds)")
    axes[1].legend(fontsize=7)
    if len(depth) > 1:
        # depth points: the plain run and the --layers variants (other ablations keep the preset's depth)
        layers_of = {x["model"]: x["layers"] for x in results if not x["flags"] or x["flags"][0] == "--layers"}
        pts = sorted((layers_of[r["model"]], r[metric]) for r in rows if r["model"] in layers_of and metric in r)
        axes[2].errorbar(
            [k for k, _ in pts], [m for _, (m, _) in pts], yerr=[s for _, (_, s) in pts], marker="o", capsize=3
        )
        axes[2].set(xlabel="layers", ylabel=f"test {metric.upper()} (%)", title="Depth")
    return save_figure(fig, path)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, run_ablations, argv, prog, config=AblationConfig.from_args)


def run_ablations(cfg: AblationConfig) -> int:
    todo = variants(list(cfg.suites), cfg.preset.layers, list(cfg.depths))
    for variant in todo:  # every variant's trainer flags parse before any preprocessing
        try:
            check_trainer_flags(variant_options(cfg, variant), cfg.preset.name, [cfg.preset.protocol], cfg.out)
        except SeedFlagsError as err:
            raise FlagError(str(err)) from None
    dataset = load_dataset(cfg.source)  # one shard set for every variant
    shards = preset_shard_set(
        cfg.source,
        cfg.shards,
        cfg.trainer.epochs,
        cfg.preset,
        [cfg.preset.protocol],
        dataset,
        device_kind(cfg.trainer.device),
    )
    results = []
    for variant in todo:
        results += run_variant(cfg, variant, shards)
    rows, md = table(results, cfg.preset.dataset, list(cfg.suites))
    metric = results[0]["selection_metric"]
    png = plot(results, rows, cfg.out, cfg.out / "ablations.png", metric)
    publish_results(
        cfg.out,
        {
            "preset": cfg.preset.name,
            "suites": list(cfg.suites),
            "runs": results,
            "table": table_json(rows),
            "paper": PAPER_ABLATIONS.get(cfg.preset.dataset, {}),
        },
        md,
        png,
    )
    return 0


if __name__ == "__main__":
    exit_process(main)
