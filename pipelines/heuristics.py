"""Heuristic baselines report: score a split's candidates with CN/AA/RA/... and rank them.

    python -m pipelines.heuristics --dataset citeseer [--protocol original|heart|ogb|both]
        [--data-dir DIR] [--ogb-root DIR] [--heuristics cn,aa,ra] [--split test]
        [--out results/heuristics-<dataset>.json]

The default rows are the run report's: CN, AA and RA, then WCN, WAA and WRA on an edge list with a weight
column, EdgeBank and recent PA (rpa) on a temporal split (common/heuristics_temporal.py), and on a --directed
edge list CN / AA / RA over paths u -> w -> v and the reverse-edge rule (common/heuristics_directed.py).

Each protocol's positives and negatives are scored on `dataset.graph_for(split)` (the graph a model
would see for that split). Every distinct candidate pair of the split, across all protocols, is
scored once per heuristic and scattered back (HeaRT repeats pairs heavily). Metrics come from
`common.metrics.evaluate`, so this report and the trainer rank identically. On citeseer (test) this
reproduces the paper's Tables 5/6: original MRR CN 28.34, AA 29.37, RA 27.61; HeaRT 8.42, 10.82, 10.84.

The table (percentages) goes to stdout, progress to logging, and a JSON file (fractions) to --out.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from common.atomic import write_json_atomic
from common.cli import Parser, command, exit_process, summary
from common.datasets import PROTOCOLS, DatasetError, DatasetSpec, LinkDataset, load_dataset
from common.flags import FlagError, add_dataset_flags, add_directed_flag, add_overwrite_flag, comma_list
from common.heuristics import ALL, DIRECTED, HEURISTICS, TEMPORAL, WEIGHTED, label, score_split
from common.metrics import METRIC_KEYS, as_percent, format_table
from common.outputs import OutputError, check_output, check_replacement, stamp

log = logging.getLogger("pipelines.heuristics")

DEFAULT_HEURISTICS = ("cn", "aa", "ra")
ALL_PROTOCOLS = ("both", "all")  # aliases: every protocol the dataset has


PROG = "python -m pipelines.heuristics"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    add_dataset_flags(p, split=False, nodes=False)
    add_directed_flag(p)
    p.add_argument(
        "--protocol",
        default="both",
        choices=list(PROTOCOLS) + list(ALL_PROTOCOLS),
        help="evaluation protocol; 'both'/'all' = every protocol the dataset provides (default)",
    )
    p.add_argument(
        "--heuristics",
        default=None,
        help=f"comma-separated subset of {','.join(ALL)}, or 'all' (default: the run report's: cn,aa,ra, the "
        "weighted ones with a weight column, edgebank,rpa on a temporal split, dcn,daa,dra,reverse when directed)",
    )
    p.add_argument("--split", default="test", choices=["valid", "test"], help="split to evaluate (default test)")
    p.add_argument(
        "--seed", type=int, default=0, advanced=True, help="seed for datasets that split randomly (cora, csv)"
    )
    p.add_argument("--out", default=None, help="JSON output (default results/heuristics-<dataset>.json)")
    add_overwrite_flag(p)
    return p


# ---------------------------------------------------------------------------- argument checks
def parse_heuristics(text: str | None) -> tuple[str, ...] | None:
    """--heuristics as names; None (the default) and 'all' are resolved once the dataset is loaded."""
    if text is None or text.strip() == "all":
        return None if text is None else ("all",)
    try:
        return tuple(comma_list(text, "--heuristics", allowed=ALL))
    except FlagError as err:
        raise FlagError(f"{err} (or all)") from None


def available(ds: LinkDataset) -> list[str]:
    """The heuristics this dataset can be scored by: the weighted ones need a weight column, the time-aware
    ones a temporal split."""
    return (
        list(HEURISTICS)
        + (list(WEIGHTED) if ds.weights is not None else [])
        + (list(TEMPORAL) if ds.temporal else [])
        + (list(DIRECTED) if ds.directed else [])
    )


def resolve_heuristics(ds: LinkDataset, asked: tuple[str, ...] | None) -> list[str]:
    """The names to score: the report's rows by default, every available one for 'all', else those asked, each
    one the dataset can feed (or one line saying what it lacks)."""
    if asked is None:
        return [*DEFAULT_HEURISTICS, *(h for h in available(ds) if h not in HEURISTICS)]
    if asked == ("all",):
        return available(ds)
    for name in asked:
        if name in WEIGHTED and ds.weights is None:
            raise FlagError(
                f"--heuristics {name}: {ds.name} has no weight column; use {name[1:]}, or add a column 'weight'"
            )
        if name in DIRECTED and not ds.directed:
            raise FlagError(f"--heuristics {name}: needs a directed graph (an edge list read with --directed)")
        if name in TEMPORAL and not ds.temporal:
            raise FlagError(f"--heuristics {name}: needs a temporal split (an edge list with a column 'time')")
    return list(asked)


def resolve_protocols(ds: LinkDataset, split: str, requested: str) -> list[str]:
    if split not in ds.splits:
        raise FlagError(f"--split {split}: dataset {ds.name} has no such split (has {', '.join(ds.splits)})")
    available = [p for p in PROTOCOLS if p in ds.splits[split].neg]
    if not available:
        raise FlagError(f"dataset {ds.name} has no negatives for the {split} split, so nothing can be ranked")
    if requested in ALL_PROTOCOLS:
        return available
    if requested not in available:
        raise FlagError(
            f"--protocol {requested}: dataset {ds.name} ({split}) has no '{requested}' negatives; "
            f"available: {', '.join(available)} (or 'both' for all of them)"
        )
    return [requested]


@dataclass(frozen=True)
class HeuristicsConfig:
    source: DatasetSpec  # its seed: --seed
    heuristics: tuple[str, ...] | None  # None: the run report's rows; ("all",): every available one
    protocol: str = "both"
    split: str = "test"
    out: str | None = None  # None: results/heuristics-<dataset>.json
    overwrite: bool = False

    @classmethod
    def from_args(cls, args) -> "HeuristicsConfig":
        return cls(
            DatasetSpec.from_args(args, seed=args.seed, split=None),  # its --split: the split it scores
            parse_heuristics(args.heuristics),
            args.protocol,
            args.split,
            args.out,
            args.overwrite,
        )


def default_out(ds: LinkDataset) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(ds.name).stem or ds.name)
    return Path("results") / f"heuristics-{safe}.json"


def results_table(results: dict) -> str:
    rows = []
    for proto, by_h in results.items():
        for name, metrics in by_h.items():
            rows.append({"protocol": proto, "heuristic": label(name), **as_percent(metrics)})
    headers = ["protocol", "heuristic"] + [
        k.replace("hits", "Hits") if k.startswith("hits") else k.upper() for k in METRIC_KEYS
    ]
    return format_table(rows, ["protocol", "heuristic", *METRIC_KEYS], headers=headers)


# ---------------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, score_heuristics, argv, prog, config=HeuristicsConfig.from_args)


def score_heuristics(cfg: HeuristicsConfig) -> int:
    src = cfg.source
    inputs = {"--dataset": src.dataset, "--data-dir": src.data_dir}
    try:
        if cfg.out:  # before any work: the JSON must not replace the edge list it scores, nor a run's files
            check_output(cfg.out, files=inputs)
        # its --split names the split it scores, not the shares: a too-small split's fix differs
        ds = load_dataset(src, split_flag=None)
        out = check_output(cfg.out or default_out(ds), files=inputs)
        fingerprint = ds.fingerprint()
        # two graphs of one name (the paper's citeseer, a user's citeseer.csv) share the default file: never replaced
        check_replacement(out, "heuristics", fingerprint, cfg.overwrite, what="heuristics result")
    except (DatasetError, FileNotFoundError) as err:
        raise FlagError(f"--dataset {src.dataset}: {err}") from None
    except OutputError as err:
        raise FlagError(str(err)) from None
    log.info("loaded %s", ds.summary())
    protocols = resolve_protocols(ds, cfg.split, cfg.protocol)
    results = score_split(ds, cfg.split, protocols, resolve_heuristics(ds, cfg.heuristics))
    graph = ds.graph_for(cfg.split)
    payload = {
        "dataset": ds.name,
        "split": cfg.split,
        "graph": {"nodes": graph.num_nodes, "edges": graph.num_edges},
        "num_positives": int(len(ds.splits[cfg.split].pos)),
        "negatives": {p: list(ds.splits[cfg.split].neg[p].shape[:-1]) for p in protocols},
        "units": "fractions in [0, 1]; ranks tie-averaged",
        "results": results,
        **stamp("heuristics", fingerprint),
    }
    write_json_atomic(out, payload)
    print(results_table(results))
    log.info("wrote %s", out)
    return 0


if __name__ == "__main__":
    exit_process(main)
