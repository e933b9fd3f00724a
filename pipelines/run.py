"""End-to-end recipe: preprocess (embedded Ray, cached) → train (per seed) → evaluate → report.

    python -m pipelines.run --dataset citeseer [--protocol original|heart|both] [--preset NAME] [--seeds 0,1,2]

Per protocol it builds (or reuses) one shard set, trains one run per seed (a single process on CPU or
one GPU, `torchrun --nproc-per-node G` when several GPUs are visible), and prints test MRR / Hits@K
and AUC / AP (mean ± std over seeds, test at the best validation epoch) beside the heuristics and
the paper. Everything lands in OUT/<dataset>/<preset>/ (a file's dataset name is its stem): per-seed run
folders with result.json, results.json, report.md and PNG plots.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from common.cli import latch_sigint, run_cli
from common.datasets import load_dataset
from common.presets import PRESETS, get_preset, preset_for_protocol
from pipelines import finished
from pipelines.children import exit_on_sigterm, start_child, stop_children
from pipelines import heuristics as heuristic_report
from pipelines.plots import plot_runs
from pipelines.heuristics import write_json_atomic
from pipelines.report import METRICS, aggregate, fmt, markdown, publish_results, table_json
from pipelines.run_args import RunError, build_parser, validate_args

log = logging.getLogger("pipelines.run")
AUTO = "auto"  # the searched preset (pipelines.auto_search); the paper's presets keep their own rule


def trainer_flags(args, preset_name: str, shards: str, protocol: str, seed: int, run_dir: Path) -> list[str]:
    """The seed's trainer flags. A seed folder with a last.pt resumes (a finished seed only re-reads it);
    one without is the leftover of a run killed before its first checkpoint (or nothing), which is
    cleared: the recipe owns its seed folders (trainer.run_folder refuses a run folder otherwise)."""
    resume = (run_dir / "last.pt").is_file()
    flags = ["--shards", str(shards), "--preset", preset_name, "--out", str(run_dir), "--seed", str(seed),
             "--protocol", protocol, "--device", args.device, "--resume" if resume else "--overwrite"]
    if args.epochs:
        flags += ["--epochs", str(args.epochs)]
    return flags + [a for arg in args.train_arg for a in arg.split("=", 1)]


def check_trainer_flags(args, preset_name: str, protocols: list[str]) -> None:
    """Parse the trainer's flags once up front (shards do not exist yet, so a placeholder path)."""
    from trainer.config import config_from_args
    from trainer.model import ModelConfig
    for protocol in protocols:
        name = preset_for_protocol(preset_name, protocol)
        flags = trainer_flags(args, name, "<shards>", protocol, args.seed_list[0], Path(args.out))
        given = " ".join(args.train_arg) or "(none)"
        usage = io.StringIO()
        try:
            with contextlib.redirect_stderr(usage):  # argparse prints a usage block; keep only its error line
                config = config_from_args(flags)
            ModelConfig.from_preset(name, **config.model.as_overrides())  # model flags (--attention ...) too
        except ValueError as err:
            raise RunError(f"--train-arg {given}: {err}") from None
        except SystemExit:
            lines = usage.getvalue().strip().splitlines() or ["invalid trainer flags"]
            raise RunError(f"--train-arg {given}: {lines[-1].split('error: ', 1)[-1]}") from None


def cuda_devices() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pick_preset(args, dataset: str) -> str:
    if args.preset:
        try:
            get_preset(args.preset)  # unknown names fail here, before any work
        except ValueError as err:
            raise RunError(f"--preset: {err}") from None
        return args.preset
    small = f"{dataset}-small"
    own = {name for name, p in PRESETS.items() if p.dataset == dataset}  # a file named tiny.csv is not 'tiny'
    if cuda_devices() == 0 and args.device != "cuda" and small in own:
        return small
    if dataset in own:
        return dataset
    return AUTO  # no paper preset: search one on validation (pipelines.auto_search)


def check_objective(args, preset_name: str) -> None:
    """--objective recommend acts through --preset auto's training-negatives stage: without the stage it
    would change nothing, so say so before any work."""
    if args.objective == "link-prediction":
        return
    if preset_name != AUTO:
        raise RunError(f"--objective {args.objective}: chooses --preset auto's training negatives on validation; "
                       f"preset {preset_name} has no such choice: add --preset auto, or drop --objective")
    if args.hard_neg_fraction is not None:
        raise RunError(f"--objective {args.objective}: chooses the training negatives, which --hard-neg-fraction "
                       f"{args.hard_neg_fraction:g} fixes: pass one of the two")


def load_run_dataset(args, features: bool = False):
    """The dataset as every step of the run sees it: the same flags reach preprocess_config below."""
    return load_dataset(args.dataset, data_dir=args.data_dir, ogb_root=args.ogb_root, planetoid_dir=args.planetoid_dir,
                        features=features, split=args.split_pct, nodes=args.nodes)


def preprocess_config(args, sampling: tuple[int, int], views: int, percent: float, protocols: list[str],
                      hard_neg_fraction: float | None = None):
    """The preprocess job of one shard set (this run's, or one of the auto search's): the dataset flags
    exactly as load_run_dataset passes them, so the shards hold the graph the run loaded. The training
    negatives: `hard_neg_fraction` when given (the auto recipe's stage), else the flag's (None: 0)."""
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig

    return PreprocessConfig(
        dataset=args.dataset, sampling=SamplingConfig(*sampling),
        candidates=CandidateConfig(views=views, percent=percent, protocols=tuple(protocols),
                                   hard_neg_fraction=(args.hard_neg_fraction or 0.0) if hard_neg_fraction is None
                                   else hard_neg_fraction),
        out=args.shards, data_dir=args.data_dir, ogb_root=args.ogb_root, planetoid_dir=args.planetoid_dir,
        features=args.features, split=args.split_pct, nodes=args.nodes, num_cpus=args.num_cpus)


def preset_views(args, preset) -> int:
    """Training views of a preset's shard set: --views, else one per epoch, at most 20."""
    return args.views or max(1, min(20, int(round(args.epochs or preset.epochs))))


def preprocess_shards(args, preset, protocols: list[str]) -> str:
    """Build or reuse the shard set (a complete cache returns at once)."""
    from preprocess.job import run_job

    views = preset_views(args, preset)
    cfg = preprocess_config(args, preset.sampling, views, preset.train_percent, protocols)
    result = run_job(cfg)
    shutdown_embedded_ray()
    location = result.location or str(result.path)  # a URL stays a URL (s3://...)
    log.info("shards %s: %s", "reused" if result.cached else "written", location)
    return location


def shutdown_embedded_ray() -> None:
    # Free the embedded Ray's CPUs before training in this process. A cache hit never imports Ray, so a
    # node without it (a trainer image) can run the recipes on prebuilt shards.
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def train_seed(args, preset_name: str, shards: str, protocol: str, seed: int, run_dir: Path) -> dict:
    flags = trainer_flags(args, preset_name, shards, protocol, seed, run_dir)
    gpus = cuda_devices() if args.device != "cpu" else 0
    if gpus > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}",
               "-m", "trainer", *flags, "--no-progress"]
        log.info("training seed %d on %d GPUs: %s", seed, gpus, " ".join(cmd))
        proc = start_child(cmd)
        try:
            if proc.wait() != 0:
                raise subprocess.CalledProcessError(proc.returncode, cmd)
        finally:
            stop_children([proc])
        return json.loads((run_dir / "summary.json").read_text())
    from trainer.config import config_from_args
    from trainer.train import run
    return run(config_from_args(flags))


def cpu_seed_slots(args) -> int:
    """How many seeds train at once: on CPU one process per core (each trainer takes one thread there,
    trainer.setup.cpu_threads), which on the 2-core demo machine halves the wall time of 3 seeds; GPU
    runs keep one seed at a time (a seed already fills the GPU, or torchrun spans several)."""
    if cuda_devices() and args.device != "cpu":
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(len(args.seed_list), args.parallel_seeds or cores))


def train_seeds_concurrently(args, preset_name: str, shards: str, protocol: str, runs: dict[int, Path],
                             slots: int) -> dict[int, dict]:
    """Each seed as its own `python -m trainer` process, `slots` at a time; results from summary.json.
    Same flags, so the same result as training in this process (and --resume continues a killed seed).
    A failed seed, Ctrl-C or SIGTERM (see main) stops the other trainers: none outlives the recipe."""
    pending, running, done = list(runs), {}, {}
    logs = {seed: run_dir.parent / f"seed{seed}.log" for seed, run_dir in runs.items()}
    try:
        while pending or running:
            while pending and len(running) < slots:
                seed = pending.pop(0)
                flags = trainer_flags(args, preset_name, shards, protocol, seed, runs[seed]) + ["--no-progress"]
                logs[seed].parent.mkdir(parents=True, exist_ok=True)
                log.info("training seed %d in its own process (log: %s)", seed, logs[seed])
                with open(logs[seed], "w") as f:
                    running[seed] = start_child([sys.executable, "-m", "trainer", *flags], stdout=f, stderr=f)
            time.sleep(0.5)
            for seed, proc in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[seed]
                if proc.returncode != 0:
                    tail = logs[seed].read_text().strip().splitlines()[-1:] or ["(no output)"]
                    raise RunError(f"seed {seed}: the trainer failed ({tail[0]}); full log: {logs[seed]}")
                done[seed] = json.loads((runs[seed] / "summary.json").read_text())
    finally:
        stop_children(list(running.values()))
    return done


def train_seeds(args, preset_name: str, shards: str, protocol: str, runs: dict[int, Path]) -> dict[int, dict]:
    """{seed: summary} of every run: concurrent trainer processes on CPU, one seed at a time on GPU."""
    flags = {seed: trainer_flags(args, preset_name, shards, protocol, seed, d) for seed, d in runs.items()}
    done = {seed: s for seed in runs if (s := finished.finished_summary(runs[seed], flags[seed])) is not None}
    for seed in done:
        log.info("seed %d: finished with these flags in %s; reused", seed, runs[seed])
    todo = {seed: d for seed, d in runs.items() if seed not in done}
    for run_dir in todo.values():
        finished.forget(run_dir)
    slots = cpu_seed_slots(args)
    if slots > 1:
        trained = train_seeds_concurrently(args, preset_name, shards, protocol, todo, slots)
    else:
        trained = {seed: train_seed(args, preset_name, shards, protocol, seed, d) for seed, d in todo.items()}
    for seed in trained:
        finished.mark_finished(runs[seed], flags[seed])
    return {seed: done.get(seed) or trained[seed] for seed in runs}


def result_record(dataset: str, protocol: str, preset: str, seed: int, summary: dict, features: bool) -> dict:
    model = "PENCIL" if features else "PENCIL w/o features"  # the paper's row names
    return {"dataset": dataset, "protocol": protocol, "model": model, "preset": preset, "seed": seed,
            "best_epoch": summary.get("best_epoch"), "valid": summary.get("valid") or {},
            "test": summary.get("test") or {}, "train_time_s": summary.get("train_time_s"),
            "attention_backend": summary.get("attention_backend")}


def heuristic_rows(dataset_obj, protocol: str) -> list[dict]:
    """CN / AA / RA on the same test split, as table rows (deterministic: std 0)."""
    scored = heuristic_report.score_split(dataset_obj, "test", [protocol], ["cn", "aa", "ra"])[protocol]
    return [{"dataset": dataset_obj.name, "protocol": protocol, "model": name.upper(), "seeds": [0],
             **{m: (100.0 * metrics[m], 0.0) for m in METRICS if m in metrics}}
            for name, metrics in scored.items()]


def run_protocol(args, dataset_obj, preset_name: str, protocol: str, out: Path) -> list[dict]:
    runs = {seed: out / protocol / f"seed{seed}" for seed in args.seed_list}
    chosen, priors = None, {}
    if preset_name == AUTO:
        from pipelines.auto_search import search_and_train
        summaries, chosen, priors = search_and_train(args, dataset_obj, protocol, out / protocol, runs)
    else:
        preset_name = preset_for_protocol(preset_name, protocol)  # e.g. the paper's HeaRT config
        shards = preprocess_shards(args, get_preset(preset_name), [protocol])
        summaries = train_seeds(args, preset_name, shards, protocol, runs)
    results = []
    for seed, run_dir in runs.items():
        summary = summaries[seed]
        record = result_record(dataset_obj.name, protocol, preset_name, seed, summary, args.features)
        if args.hard_neg_fraction:  # only when set, so the records of uniform-negative runs stay as they were
            record["hard_neg_fraction"] = args.hard_neg_fraction
        if chosen:
            # the searched config, with the run, and its training negatives (pipelines.auto_negatives)
            record["auto"] = {k: chosen[k] for k in ("cid", "config", "epochs", "hard_neg_fraction")}
            record["auto"]["prior"] = {k: v for k, v in priors[seed].items() if k not in ("grid", "test")}
        finished.write_if_changed(run_dir / "result.json", record, write_json_atomic)
        results.append(record)
        log.info("seed %d: test %s = %.2f (best epoch %s)", seed, summary.get("selection_metric", "mrr"),
                 100 * record["test"].get(summary.get("selection_metric", "mrr"), float("nan")), record["best_epoch"])
    results += prior_records(results, priors, runs)
    plot_runs([out / protocol / f"seed{r['seed']}" for r in results if "prior" not in r], out / protocol)
    return results


def prior_records(results: list[dict], priors: dict[int, dict], runs: dict[int, Path]) -> list[dict]:
    """The `--preset auto` blend rows (pipelines.auto_prior), one per seed, in seed<k>/prior/result.json so
    `python -m pipelines.report` over the folder shows them too; none for the paper presets."""
    if not priors:
        return []
    from pipelines.auto_prior import prior_model_name
    name = prior_model_name(results[0]["model"], list(priors.values()))
    out = []
    for record in results:
        prior = priors[record["seed"]]
        blend = {**record, "model": name, "test": prior["test"], "prior": record["auto"]["prior"],
                 "valid": {prior["metric"]: prior["valid"]}}
        finished.write_if_changed(runs[record["seed"]] / "prior" / "result.json", blend, write_json_atomic)
        out.append(blend)
    return out


def results_dir(root: str, dataset: str, preset: str) -> Path:
    """ROOT/<dataset>/<preset>: a user's graph gets its own folder, not one named after a borrowed preset.
    The dataset name is the loader's (a file's stem without .csv/.csv.gz/.parquet), made path-safe."""
    safe = re.sub(r"[^A-Za-z0-9_.+-]+", "_", dataset).strip("._") or "dataset"
    return Path(root) / safe / preset


def main(argv: list[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, exit_on_sigterm)
    return run_cli(_main, argv, prog="python -m pipelines.run")


def _main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    validate_args(args)
    dataset_obj = load_run_dataset(args)
    available = dataset_obj.protocols
    protocols = available if args.protocol == "both" else [args.protocol]
    missing = [p for p in protocols if p not in available]
    if missing:
        raise RunError(f"--protocol {','.join(missing)}: {dataset_obj.name} has only {', '.join(available)}")
    preset_name = pick_preset(args, dataset_obj.name)
    check_objective(args, preset_name)
    check_trainer_flags(args, preset_name, protocols)
    out = results_dir(args.out, dataset_obj.name, preset_name)
    results, rows = [], []
    for protocol in protocols:
        proto_results = run_protocol(args, dataset_obj, preset_name, protocol, out)
        results += proto_results
        rows += aggregate(proto_results) + heuristic_rows(dataset_obj, protocol)
    table = markdown(rows)
    publish_results(out, {"runs": results, "table": table_json(rows)}, table)
    for r in rows:
        if r["model"].startswith("PENCIL"):
            log.info("%s/%s %s: test MRR %s, AUC %s over %d seed(s); results in %s", r["dataset"], r["protocol"],
                     r["model"], fmt(*r["mrr"]), fmt(*r["auc"]) if "auc" in r else "–", len(r["seeds"]), out)
    return 0


if __name__ == "__main__":
    latch_sigint()
    raise SystemExit(main())
