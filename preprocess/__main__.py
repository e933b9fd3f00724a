"""`python -m preprocess`: parse flags, run the Ray job, print where the shards are."""

from __future__ import annotations

import argparse
import logging
import sys

from common.cli import Parser, exit_process, run_cli
from common.datasets import DatasetSpec
from common.flags import FlagError, add_dataset_flags, add_graph_input_flags, add_num_cpus_flag
from common.outputs import OutputError, check_output_folder
from common.presets import default_sampling
from common.storage import open_storage
from preprocess.config import CandidateConfig, ConfigError, PreprocessConfig, SamplingConfig

PROG = "python -m preprocess"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(
        prog=prog,
        description="Sample link-centric subgraphs (ShaDowKHop) into WebDataset shards with Ray. Writes\n"
        "OUT/<dataset>/<cache key>/ and prints that path last. An embedded Ray starts unless RAY_ADDRESS\n"
        "is set (as under `ray job submit`).",
    )
    add_dataset_flags(p, split_kinds=True)
    add_graph_input_flags(p)
    p.add_argument(
        "--sampling",
        default=None,
        metavar="D,N",
        help="hops d and neighbours n per frontier entry (default: the paper's preset for the dataset)",
    )
    p.add_argument(
        "--closest",
        type=int,
        default=0,
        metavar="K",
        advanced=True,
        help="keep at most K context nodes per link, the structurally closest: the pair's common neighbours, "
        "then their other neighbours, then the rest, each by its links into the sampled context (default 0: all)",
    )
    p.add_argument(
        "--views", type=int, default=2, help="independent training draws (negatives + subgraphs) (default 2)"
    )
    p.add_argument(
        "--protocol",
        default="both",
        help="eval protocol(s): both/all (= every protocol the dataset has), or a comma list of "
        "original,heart,ogb,pairs (default both; pairs: the --eval-pairs file's)",
    )
    p.add_argument(
        "--out", default="shards", help="output root, local or s3://; shards go to OUT/<dataset>/<key> (default shards)"
    )
    p.add_argument(
        "--features", action="store_true", help="a paper dataset's node features (an edge list's: --node-features FILE)"
    )
    p.add_argument("--force", action="store_true", help="rebuild even if a complete shard set exists")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and the final path")
    add_num_cpus_flag(p)
    p.add_argument(
        "--splits",
        default="train,valid,test",
        advanced=True,
        help="comma-separated splits to build (default train,valid,test)",
    )
    p.add_argument(
        "--percent",
        type=float,
        default=100.0,
        advanced=True,
        help="%% of training positives per view, a seeded subset (default 100)",
    )
    p.add_argument(
        "--neg-ratio", type=int, default=1, advanced=True, help="training negatives per positive (default 1)"
    )
    p.add_argument(
        "--hard-neg-fraction",
        type=float,
        default=0.0,
        metavar="F",
        advanced=True,
        help="fraction of each training view's negatives drawn as 2-hop non-edges of the training graph "
        "(hard negatives that share a neighbour with their pair); the rest uniform (default 0; part "
        "of the cache key when not 0)",
    )
    p.add_argument(
        "--valid-pool",
        type=int,
        default=0,
        metavar="K",
        advanced=True,
        help="K more random validation negatives per protocol negative, for selection: validation's ranks are "
        "then estimated at the test's number of negatives (default 0: none)",
    )
    p.add_argument(
        "--seed", type=int, default=0, advanced=True, help="seed of candidates, sampling and local orders (default 0)"
    )
    p.add_argument(
        "--links-per-shard", type=int, default=8192, advanced=True, help="links per shard tar (default 8192)"
    )
    p.add_argument(
        "--block-size", type=int, default=256, advanced=True, help="links per Arrow block inside a shard (default 256)"
    )
    p.add_argument(
        "--shard-mb",
        type=float,
        default=64.0,
        advanced=True,
        help="a shard also closes before its worst-case size passes this many MB (default 64)",
    )
    p.add_argument(
        "--worker-memory-mb",
        type=int,
        default=1500,
        advanced=True,
        help="memory budget of one shard task; checked up front, and Ray schedules by it (default 1500)",
    )
    p.add_argument(
        "--targets",
        default=None,
        metavar="HEURISTIC",
        advanced=True,
        help="heuristic estimation: label every link with its normalised cn, aa, ra, katz, spd or pr "
        "on the full graph (a regression set; part of the cache key)",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        advanced=True,
        help="on a cache hit check shard sizes only, not their sha256 (for huge sets)",
    )
    return p


def _split_list(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


def config_from_args(args: argparse.Namespace) -> PreprocessConfig:
    sampling = SamplingConfig.parse(args.sampling) if args.sampling else SamplingConfig(*default_sampling(args.dataset))
    sampling = SamplingConfig(sampling.d, sampling.n, args.closest) if args.closest else sampling
    protocols = None if args.protocol.strip().lower() in ("both", "all") else _split_list(args.protocol)
    try:
        data = DatasetSpec.from_args(args, features=args.features, seed=args.seed, valid_pool=args.valid_pool)
    except FlagError as err:
        raise ConfigError(str(err)) from None
    candidates = CandidateConfig(
        views=args.views,
        percent=args.percent,
        neg_ratio=args.neg_ratio,
        splits=_split_list(args.splits),
        protocols=protocols,
        hard_neg_fraction=args.hard_neg_fraction,
    )
    return PreprocessConfig(
        data=data,
        sampling=sampling,
        candidates=candidates,
        out=args.out,
        targets=args.targets,
        num_cpus=args.num_cpus,
        links_per_shard=args.links_per_shard,
        links_per_block=args.block_size,
        shard_mb=args.shard_mb,
        worker_memory_mb=args.worker_memory_mb,
        force=args.force,
    )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_cli(lambda a: _main(a, prog), argv, prog=prog)


def _main(argv: list[str] | None, prog: str) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = config_from_args(args)
        # the sets go to OUT/<dataset>/<key>: never over an input, nor nested in a run or another shard set
        check_output_folder(config.out, "--out", files={"--dataset": args.dataset, "--nodes": args.nodes})
    except (ConfigError, OutputError) as err:
        parser.error(str(err))
    open_storage(config.out).check_writable()  # before loading anything: a bad --out costs nothing
    from common.datasets import DatasetError
    from preprocess.job import run_job

    try:
        result = run_job(config, verify=not args.no_verify)
    except (DatasetError, ConfigError) as err:
        if args.debug:
            raise
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    state = "cached (nothing sampled)" if result.cached else "written"
    print(f"shards {state}: {result.location}")
    return 0


if __name__ == "__main__":
    exit_process(main)
