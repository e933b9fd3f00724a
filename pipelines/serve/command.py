"""Serve a trained run over HTTP: score pairs and recommend links on a graph that changes while it runs.

    pencil serve --checkpoint RUN --state DIR [--host 127.0.0.1] [--port 8000] [--replicas N] [--token-file F]

A Ray Serve service in the user's node ids: POST /score, GET /recommend/{node}, POST /edges (bearer token),
GET /neighbors/{node}, GET /health. Scores and recommendations come from the same engines, with the same
defaults, as `pencil score` and `pencil recommend`; edits go to an append-only log in --state, fsync'd
before they are acknowledged and replayed on restart. Without RAY_ADDRESS the command starts its own Ray,
which dies with it (even by kill -9); with RAY_ADDRESS it deploys to that cluster. --write-config writes a
config file for `serve run` / `serve deploy` instead. See docs/serve.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import snapshot
from common.atomic import write_text_atomic
from common.cli import Parser, command, exit_process, summary
from common.datasets.tables import suffix_of
from common.flags import FlagError, add_moved_dataset_flag, add_num_cpus_flag, add_overwrite_flag
from common.manifest_record import Manifest
from common.outputs import check_output, check_replacement, stamp_line
from common.shards import ShardError
from common.storage import absolute_location
from pipelines.core.children import exit_on_sigterm
from pipelines.core.runs import (
    RunFolderError,
    load_checkpoint,
    reads_features,
    resolve_checkpoint,
    run_inputs,
    run_manifest,
)
from pipelines.recommend.engine import RecommendError, add_engine_flags
from pipelines.serve.edit_log import LOG_NAME
from pipelines.serve.handlers import NO_TOKEN, TOKEN_ENV, Limits
from pipelines.serve.settings import Settings
from pipelines.serve.start import ServeStartError, deploy, precheck
from preprocess.cluster import RayConnectError

log = logging.getLogger("pipelines.serve")
PROG = "python -m pipelines.serve"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--checkpoint", required=True, help="a run folder (best.pt, else last.pt) or a .pt file")
    p.add_argument("--state", required=True, help="folder of the service's edit log (created; replayed on restart)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    p.add_argument(
        "--replicas", type=int, default=1, help="model replicas (default 1; a GPU each where the cluster has GPUs)"
    )
    p.add_argument(
        "--token-file",
        default=None,
        help=f"file holding the bearer token of POST /edges (else ${TOKEN_ENV}; with neither, edits are refused)",
    )
    p.add_argument(
        "--graph",
        default=snapshot.WHOLE,
        help="graph to serve: all (every split's edges, default), "
        "train/valid/test or today's edge list (.csv/.parquet)",
    )
    add_moved_dataset_flag(p, advanced=True)
    add_engine_flags(p)
    p.add_argument(
        "--write-config",
        default=None,
        metavar="FILE",
        help="write a Ray Serve config file for `serve run` / `serve deploy` and exit",
    )
    add_overwrite_flag(p, "--write-config", advanced=True)
    for name, default, text in (
        ("max-pairs", Limits.max_pairs, "pairs per /score request"),
        ("max-edges", Limits.max_edges, "pairs per /edges request"),
        ("max-k", Limits.max_k, "largest k of /recommend"),
        ("max-pool", Limits.max_pool, "largest pool of /recommend"),
        ("max-body-bytes", Limits.max_body_bytes, "bytes of a request body"),
        ("max-batch", Settings.max_batch, "requests batched into one forward pass"),
    ):
        p.add_argument(
            f"--{name}", type=int, default=default, advanced=True, help=f"at most this many {text} (default {default})"
        )
    p.add_argument(
        "--batch-wait-ms",
        type=float,
        default=Settings.batch_wait_ms,
        advanced=True,
        help=f"how long a batch waits for more requests (default {Settings.batch_wait_ms:g})",
    )
    p.add_argument(
        "--replica-cpus",
        type=float,
        default=Settings.replica_cpus,
        advanced=True,
        help=f"CPUs (and torch threads) per replica (default {Settings.replica_cpus:g})",
    )
    add_num_cpus_flag(p)
    return p


@dataclass(frozen=True)
class ServeCommand:
    """What `pencil serve` is configured by: the service's Settings and how this command runs it."""

    settings: Settings
    host: str = "127.0.0.1"
    port: int = 8000
    write_config: str | None = None  # write a Serve config file here and exit
    overwrite: bool = False
    num_cpus: int | None = None

    @classmethod
    def from_args(cls, args) -> "ServeCommand":
        """The flags, with absolute paths (replicas run elsewhere, and a config file is read from another folder)
        and the run's shard set."""
        try:
            ckpt = resolve_checkpoint(args.checkpoint).resolve()
            payload = load_checkpoint(ckpt)
            manifest = run_manifest(payload, ckpt, args.shards)  # a relative or moved set is named here
            graph = args.graph if args.graph in snapshot.GRAPH_NAMES else str(Path(args.graph).resolve())
            if graph not in snapshot.GRAPH_NAMES and not Path(graph).is_file():
                raise ValueError(
                    f"--graph {args.graph}: no such file; pass all, train, valid, test or an edge-list file"
                )
            s = Settings.from_dict(
                {
                    "checkpoint": str(ckpt),
                    "state": str(Path(args.state).resolve()),
                    "shards": absolute_location(manifest.root),
                    "graph": graph,
                    "dataset": run_edge_list(manifest, args.dataset),
                    "features": reads_features(payload, manifest),
                    "replicas": args.replicas,
                    "replica_cpus": args.replica_cpus,
                    "device": args.device,
                    "k": args.k,
                    "pool": args.pool,
                    "retriever": args.retriever,
                    "orderings": args.orderings,
                    "seed": args.seed,
                    "prior_weight": args.prior_weight,
                    "batch_size": args.batch_size,
                    "token_budget": args.token_budget,
                    "max_pairs": args.max_pairs,
                    "max_edges": args.max_edges,
                    "max_k": args.max_k,
                    "max_pool": args.max_pool,
                    "max_body_bytes": args.max_body_bytes,
                    "max_batch": args.max_batch,
                    "batch_wait_ms": args.batch_wait_ms,
                    "token_file": str(Path(args.token_file).resolve()) if args.token_file else None,
                }
            )
            s = s.with_token()  # a bad token file fails here, in one line
        except (ValueError, RunFolderError, RecommendError, ShardError) as err:
            raise FlagError(str(err)) from None
        return cls(s, args.host, args.port, args.write_config, args.overwrite, args.num_cpus)


def run_edge_list(manifest: Manifest, moved: str | None) -> str | None:
    """The run's edge list, absolute, for a config file read in another folder: --dataset where it moved, else the
    one the set was built from (a paper dataset, named by its name: None)."""
    path = moved or manifest.config["dataset"]
    return absolute_location(path) if moved or suffix_of(path) else None


def config_data(path: str, s: Settings, overwrite: bool) -> str:
    """--write-config FILE through the output guard: never over the checkpoint, the run's edge list, the token
    file or anything of the run's, and never over a file other than a config of this run's data. Returns the
    data's fingerprint, the file's stamp."""
    manifest = run_manifest(load_checkpoint(Path(s.checkpoint)), s.checkpoint, s.shards)
    files, folders = run_inputs(s.checkpoint, manifest)
    on_file = s.graph not in snapshot.GRAPH_NAMES
    check_output(
        path,
        "--write-config",
        files={**files, "--graph": s.graph if on_file else None, "--token-file": s.token_file, "--dataset": s.dataset},
        folders=folders,
    )
    check_replacement(path, "serve-config", manifest.fingerprint, overwrite, "--write-config", "config file")
    return manifest.fingerprint


def write_config(path: str, s: Settings, host: str, port: int, data: str = "unknown") -> None:
    """A Serve config with the two applications, built by the same functions as the command's; `data`: the run's
    data fingerprint (its stamp, common.outputs). Says where the token comes from: it is never in the file."""
    import yaml

    from pipelines.serve.app import GRAPH_APP, SERVICE_APP

    defaults = Settings()
    service = {k: v for k, v in s.service_dict().items() if k != "token_sha256" and v != getattr(defaults, k)}
    if s.token_file:
        service["token_file"] = s.token_file
    config = {
        "proxy_location": "HeadOnly",
        "http_options": {"host": host, "port": port},
        "applications": [
            {
                "name": GRAPH_APP,
                "route_prefix": None,
                "import_path": "pipelines.serve.app:graph_app",
                "args": s.owner_dict(),
            },
            {
                "name": SERVICE_APP,
                "route_prefix": "/",
                "import_path": "pipelines.serve.app:service_app",
                "args": service,
            },
        ],
    }
    write_text_atomic(
        path,
        f"# {stamp_line('serve-config', data)}\n"
        f"# {PROG} --write-config: `serve run {Path(path).name}` or `serve deploy {Path(path).name}` "
        "(RAY_ADDRESS: the cluster); the token comes from token_file\n" + yaml.safe_dump(config, sort_keys=False),
    )
    if s.token_file:
        log.info(
            "the token is not in %s: the application reads it from token_file %s where it is built (the file "
            "must be there)",
            path,
            s.token_file,
        )
    elif s.token_sha256:
        log.warning(
            "the token (%s) is not in %s: set %s where `serve run` / `serve deploy` builds the application, "
            "or pass --token-file",
            TOKEN_ENV,
            path,
            TOKEN_ENV,
        )
    else:
        log.warning("%s", NO_TOKEN)


def run_service(s: Settings, host: str, port: int, num_cpus: int | None, prog: str) -> int:
    from pipelines.core.ray_head import local_head
    from preprocess.cluster import signals_end_attach

    on_cluster = bool(os.environ.get("RAY_ADDRESS"))
    with contextlib.ExitStack() as stack:
        head = metrics = None
        if not on_cluster:  # before Ray is imported: it reads the head's auth token from the environment then
            address, head, metrics = stack.enter_context(local_head(num_cpus))
        import ray
        from ray import serve

        from pipelines.serve.app import GRAPH_APP, SERVICE_APP, graph_app, service_app

        if on_cluster:
            log.info("RAY_ADDRESS=%s: deploying to that cluster", os.environ["RAY_ADDRESS"])
        # SIGTERM ends the command while ray.init waits on the cluster (preprocess.cluster)
        with signals_end_attach(os.environ["RAY_ADDRESS"]) if on_cluster else contextlib.nullcontext():
            ray.init(address=None if on_cluster else address, log_to_driver=False)
        stack.callback(ray.shutdown)
        signal.signal(signal.SIGTERM, exit_on_sigterm)  # after ray.init, whose own handler exits without unwinding
        serve.start(http_options={"host": host, "port": port}, proxy_location="HeadOnly")
        if on_cluster:  # the cluster outlives the command; its applications do not
            stack.callback(lambda: [serve.delete(app) for app in (SERVICE_APP, GRAPH_APP)])
        deploy(built(graph_app, s.owner_dict(), GRAPH_APP), GRAPH_APP, None)
        service = {**s.service_dict(), "token_file": s.token_file}
        deploy(built(service_app, service, SERVICE_APP), SERVICE_APP, "/")
        print(
            f"{prog}: serving {s.checkpoint} on {s.graph} at http://{host}:{port} ({s.replicas} replica(s); "
            f"edit log {Path(s.state) / LOG_NAME})",
            file=sys.stderr,
            flush=True,
        )
        if s.token_sha256 is None:
            print(f"{prog}: warning: {NO_TOKEN}", file=sys.stderr, flush=True)
        if metrics:
            print(f"{prog}: metrics at http://127.0.0.1:{metrics}/metrics (Prometheus)", file=sys.stderr, flush=True)
        while head is None or head.poll() is None:
            time.sleep(1.0)
        raise RuntimeError("the local Ray head stopped; the service is down")


def built(builder, settings: dict, name: str):
    """An application from its builder, whose checks (Settings.check_run) meet what changed since precheck (a
    shard set gone) as a deployment would: `name could not start: why`."""
    try:
        return builder(settings)
    except (ValueError, ShardError) as err:  # RunFolderError is a ValueError
        raise ServeStartError(f"{name} could not start: {err}") from None


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, lambda cmd: serve(cmd, prog), argv, prog, config=ServeCommand.from_args)


def serve(cmd: ServeCommand, prog: str) -> int:
    s = cmd.settings
    try:
        if cmd.write_config:
            write_config(cmd.write_config, s, cmd.host, cmd.port, config_data(cmd.write_config, s, cmd.overwrite))
            log.info("wrote %s", cmd.write_config)
            return 0
        precheck(s, cmd.host, cmd.port)  # before Ray: every cause it can name, in one line
    except (ValueError, RunFolderError, RecommendError, RayConnectError, ShardError) as err:
        raise FlagError(str(err)) from None
    return run_service(s, cmd.host, cmd.port, cmd.num_cpus, prog)


if __name__ == "__main__":
    exit_process(main)
