"""The search's shard sets, built with one embedded Ray for all of them against one Ray per set, side by side.

    python -m bench.shard_sets --dataset ../shared/data/graphs/ppi.csv.gz [--repeats 3]

`--preset auto` builds one shard set per candidate sampling (pipelines.auto.recipe.shard_sets) before any
training. Each repeat builds all of them into a fresh cache twice, alternating which arm goes first: "one Ray"
as the recipe does (build_shard_set(keep_ray=True), one shutdown at the end), "Ray per set" as the recipe did
before (every set starts and stops its own). Prints wall seconds per arm and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workload import print_table


def build_all(dataset_arg: str, cache: Path, keep_ray: bool) -> float:
    """Wall seconds to build every candidate sampling's set of `dataset_arg` into `cache`, as the recipe would."""
    from common.datasets import DatasetSpec, load_dataset
    from common.presets import get_preset
    from pipelines.auto.config import DEFAULT_PRESET, SearchConfig, candidates
    from pipelines.auto.recipe import negatives_per_positive, run_epochs, shard_sets
    from pipelines.core.run_config import RunConfig, build_parser
    from pipelines.core.shard_sets import build_shard_set, preprocess_config, preset_views, view_percent

    run = RunConfig.from_args(build_parser().parse_args(["--dataset", dataset_arg, "--shards", str(cache)]))
    dataset = load_dataset(DatasetSpec(dataset_arg))
    train = len(dataset.splits["train"].pos)
    percent = view_percent(get_preset(DEFAULT_PRESET), train, "cpu", dataset.graph)
    view = round(train * percent / 100)
    ratio = negatives_per_positive(run, SearchConfig(), dataset.graph, view)
    epochs = run_epochs(run, SearchConfig(), view, ratio)
    t0 = time.perf_counter()
    if keep_ray:
        shard_sets(run, dataset, "original", epochs, percent, ratio)
    else:
        views = preset_views(run.shards, epochs)
        for sampling in dict.fromkeys(c.sampling for c in candidates()):
            cfg = preprocess_config(run.source, run.shards, sampling, views, percent, ["original"], (None, ratio))
            build_shard_set(cfg, dataset)
    return time.perf_counter() - t0


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True, help="a dataset name or an edge list, as pencil run takes it")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    import ray  # noqa: F401  (imported once, before either arm is timed)

    times = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            for keep in (True, False) if r % 2 == 0 else (False, True):
                times[keep].append(build_all(a.dataset, Path(tmp) / f"r{r}-{int(keep)}", keep))
    one, each = statistics.median(times[True]), statistics.median(times[False])
    print_table(
        f"{a.dataset}: the search's shard sets, {a.repeats} repeats, each into a fresh cache",
        ["arm", "wall s (median)", "runs"],
        [
            ["one Ray for every set", f"{one:.1f}", " ".join(f"{t:.1f}" for t in times[True])],
            ["one Ray per set", f"{each:.1f}", " ".join(f"{t:.1f}" for t in times[False])],
            ["saved", f"{each - one:.1f} ({100 * (each - one) / each:.0f} %)", ""],
        ],
    )


if __name__ == "__main__":
    main()
