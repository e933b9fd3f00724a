"""`pencil`: the one front door. Each subcommand is an entry point that also runs as `python -m MODULE`.

pencil run --dataset edges.csv --seeds 0,1,2        # your graph, end to end
pencil recommend --checkpoint RUN --all-nodes --out recs.parquet
pencil paper ablations --preset citeseer-ablate-small
"""

from __future__ import annotations

import importlib
import sys

from common.cli import exit_process

# name: (module whose main(argv, prog) runs it, one line for `pencil --help`)
COMMANDS = {
    "run": ("pipelines.run", "train PENCIL on a dataset or your edge list, end to end (preprocess, train, report)"),
    "score": ("pipelines.score", "score given pairs with a trained run"),
    "recommend": ("pipelines.recommend.job", "top-k new links per node with a trained run"),
    "evaluate": ("pipelines.recommend.evaluation", "full-ranking evaluation of a run's recommendations"),
    "serve": ("pipelines.serve.command", "an online service: score, recommend and edit the graph over HTTP"),
    "preprocess": ("preprocess.__main__", "sample subgraphs into a shard set (Ray; `ray job submit` on a cluster)"),
    "train": ("trainer.train", "train on a shard set (`torchrun ... -m trainer` for several GPUs)"),
    "report": ("pipelines.report", "mean ± std over seeds of finished runs, as one table"),
    "heuristics": ("pipelines.heuristics", "CN / AA / RA / ... baselines on a dataset's split"),
    "paper": (None, "the paper's other experiments: pencil paper --help"),
}
PAPER = {
    "ablations": ("pipelines.paper.ablations", "MR, W0 init, WPE, depth, LRP-k (appendix ablations)"),
    "gnn-baselines": ("pipelines.paper.gnn_baselines", "GCN, SAGE, GAT under the same protocols"),
    "gnn-full-ranking": ("pipelines.paper.gnn_full_ranking", "the GNN row of the full-ranking table"),
    "latent-space": ("pipelines.paper.latent_space", "link prediction on latent-space graphs (appendix)"),
    "heuristic-estimation": ("pipelines.paper.heuristic_estimation", "how well each model learns CN, AA, RA, ..."),
}


def usage(prog: str, table: dict) -> str:
    width = max(map(len, table))
    lines = [f"usage: {prog} COMMAND [--help] ...", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in table.items()]
    lines += [
        "",
        f"`{prog} COMMAND --help` shows a command's flags; `{prog} COMMAND --help-all` adds the research and "
        "performance knobs.",
    ]
    return "\n".join(lines)


def dispatch(argv: list[str], prog: str, table: dict) -> int:
    if not argv:  # no command: the usage, as an error (a script that forgot its command must not succeed)
        print(usage(prog, table), file=sys.stderr)
        print(f"{prog}: error: a command is required (see --help)", file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(usage(prog, table))
        return 0
    name, rest = argv[0], argv[1:]
    if name == "--help-all":  # each command's flag, not this dispatcher's: say whose, with a command to run
        first = next(iter(table))
        print(
            f"{prog}: error: --help-all is each command's flag: {prog} COMMAND --help-all (e.g. {prog} {first} "
            f"--help-all); the commands: {prog} --help",
            file=sys.stderr,
        )
        return 2
    if name not in table:
        print(
            f"{prog}: error: unknown command '{name}'; choose one of {', '.join(table)} (see --help)", file=sys.stderr
        )
        return 2
    if name == "paper":
        return dispatch(rest, f"{prog} paper", PAPER)
    module = importlib.import_module(table[name][0])
    return module.main(rest, prog=f"{prog} {name}")


def main(argv: list[str] | None = None) -> int:
    from common.cli import latch_sigint

    latch_sigint()
    return dispatch(sys.argv[1:] if argv is None else list(argv), "pencil", COMMANDS)


def entry() -> None:
    """The `pencil` console script (pyproject.toml): main() as the process's whole life (common.cli.exit_process)."""
    exit_process(main)


if __name__ == "__main__":
    entry()
