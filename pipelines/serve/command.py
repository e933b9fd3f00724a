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
import fcntl
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

from common import snapshot
from common.cli import Parser, command, summary
from common.flags import add_num_cpus_flag
from pipelines.core.children import exit_on_sigterm
from pipelines.core.runs import RunFolderError, resolve_checkpoint
from pipelines.recommend.engine import RecommendError, add_engine_flags
from pipelines.serve.edit_log import LOG_NAME
from pipelines.serve.handlers import NO_TOKEN, TOKEN_ENV, Limits
from pipelines.serve.settings import Settings

log = logging.getLogger("pipelines.serve")
PROG = "python -m pipelines.serve"


def build_parser(prog: str = PROG) -> Parser:
    p = Parser(prog=prog, description=summary(__doc__))
    p.add_argument("--checkpoint", required=True, help="a run folder (best.pt, else last.pt) or a .pt file")
    p.add_argument("--state", required=True, help="folder of the service's edit log (created; replayed on restart)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    p.add_argument("--replicas", type=int, default=1, help="model replicas (default 1; a GPU each where the "
                   "cluster has GPUs)")
    p.add_argument("--token-file", default=None, help=f"file holding the bearer token of POST /edges (else "
                   f"${TOKEN_ENV}; with neither, edits are refused)")
    p.add_argument("--graph", default="test", help="graph to serve: train/valid/test (the split's graph, default "
                   "test) or an edge-list file (.csv/.parquet, src,dst) of today's graph")
    add_engine_flags(p)
    p.add_argument("--write-config", default=None, metavar="FILE",
                   help="write a Ray Serve config file for `serve run` / `serve deploy` and exit")
    for name, default, text in (("max-pairs", Limits.max_pairs, "pairs per /score request"),
                                ("max-edges", Limits.max_edges, "pairs per /edges request"),
                                ("max-k", Limits.max_k, "largest k of /recommend"),
                                ("max-pool", Limits.max_pool, "largest pool of /recommend"),
                                ("max-body-bytes", Limits.max_body_bytes, "bytes of a request body"),
                                ("max-batch", Settings.max_batch, "requests batched into one forward pass")):
        p.add_argument(f"--{name}", type=int, default=default, advanced=True, help=f"at most this many {text} "
                       f"(default {default})")
    p.add_argument("--batch-wait-ms", type=float, default=Settings.batch_wait_ms, advanced=True,
                   help=f"how long a batch waits for more requests (default {Settings.batch_wait_ms:g})")
    p.add_argument("--replica-cpus", type=float, default=Settings.replica_cpus, advanced=True,
                   help=f"CPUs (and torch threads) per replica (default {Settings.replica_cpus:g})")
    add_num_cpus_flag(p)
    return p


def settings_from_args(args) -> Settings:
    """The flags as Settings, with absolute paths (replicas run elsewhere) and the run's shard set."""
    from trainer import checkpoint
    ckpt = resolve_checkpoint(args.checkpoint).resolve()
    shards = checkpoint.load(ckpt)["config"]["data"]["shards"]
    graph = args.graph if args.graph in snapshot.SPLIT_NAMES else str(Path(args.graph).resolve())
    if graph not in snapshot.SPLIT_NAMES and not Path(graph).is_file():
        raise ValueError(f"--graph {args.graph}: no such file; pass train, valid, test or an edge-list file")
    token_file = str(Path(args.token_file).resolve()) if args.token_file else None
    s = Settings.from_dict({
        "checkpoint": str(ckpt), "state": str(Path(args.state).resolve()), "shards": str(shards), "graph": graph,
        "replicas": args.replicas, "replica_cpus": args.replica_cpus, "device": args.device, "k": args.k,
        "pool": args.pool, "retriever": args.retriever, "orderings": args.orderings, "seed": args.seed,
        "prior_weight": args.prior_weight, "batch_size": args.batch_size, "token_budget": args.token_budget,
        "max_pairs": args.max_pairs, "max_edges": args.max_edges, "max_k": args.max_k, "max_pool": args.max_pool,
        "max_body_bytes": args.max_body_bytes, "max_batch": args.max_batch, "batch_wait_ms": args.batch_wait_ms,
        "token_file": token_file})
    return s.with_token()  # a bad token file fails here, in one line


def check_state_free(folder: str) -> None:
    """Refuse at once a state folder whose log another running service holds (the owner would refuse it too,
    after Serve's retries)."""
    path = Path(folder) / LOG_NAME
    if not path.exists():
        return
    with open(path, "rb") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"--state {folder}: its edit log is in use by another running service; stop that one "
                             "or pass another --state") from None


def check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server: old connections do not count
        try:
            s.bind((host, port))
        except OSError as err:
            raise ValueError(f"--port {port}: cannot listen on {host}:{port} ({err.strerror}); choose another "
                             "--port or --host") from None


def write_config(path: str, s: Settings, host: str, port: int) -> None:
    """A Serve config with the two applications, built by the same functions as the command's."""
    import yaml
    from pipelines.serve.app import GRAPH_APP, SERVICE_APP
    defaults = Settings()
    service = {k: v for k, v in s.service_dict().items() if k != "token_sha256" and v != getattr(defaults, k)}
    if s.token_file:
        service["token_file"] = s.token_file
    config = {"proxy_location": "HeadOnly", "http_options": {"host": host, "port": port}, "applications": [
        {"name": GRAPH_APP, "route_prefix": None, "import_path": "pipelines.serve.app:graph_app",
         "args": s.owner_dict()},
        {"name": SERVICE_APP, "route_prefix": "/", "import_path": "pipelines.serve.app:service_app",
         "args": service}]}
    Path(path).write_text(f"# {PROG} --write-config: `serve run {Path(path).name}` or `serve deploy "
                          f"{Path(path).name}` (RAY_ADDRESS: the cluster); the token comes from token_file\n"
                          + yaml.safe_dump(config, sort_keys=False))


def run_service(s: Settings, host: str, port: int, num_cpus: int | None, prog: str) -> int:
    from pipelines.core.ray_head import local_head
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
        ray.init(address=None if on_cluster else address, log_to_driver=False)
        stack.callback(ray.shutdown)
        signal.signal(signal.SIGTERM, exit_on_sigterm)  # after ray.init, whose own handler exits without unwinding
        serve.start(http_options={"host": host, "port": port}, proxy_location="HeadOnly")
        if on_cluster:  # the cluster outlives the command; its applications do not
            stack.callback(lambda: [serve.delete(app) for app in (SERVICE_APP, GRAPH_APP)])
        serve.run(graph_app(s.owner_dict()), name=GRAPH_APP, route_prefix=None)
        service = {**s.service_dict(), "token_file": s.token_file}
        serve.run(service_app(service), name=SERVICE_APP, route_prefix="/")
        print(f"{prog}: serving {s.checkpoint} on {s.graph} at http://{host}:{port} ({s.replicas} replica(s); "
              f"edit log {Path(s.state) / LOG_NAME})", file=sys.stderr, flush=True)
        if s.token_sha256 is None:
            print(f"{prog}: warning: {NO_TOKEN}", file=sys.stderr, flush=True)
        if metrics:
            print(f"{prog}: metrics at http://127.0.0.1:{metrics}/metrics (Prometheus)", file=sys.stderr, flush=True)
        while head is None or head.poll() is None:
            time.sleep(1.0)
        raise RuntimeError("the local Ray head stopped; the service is down")


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return command(build_parser, _main, argv, prog)


def _main(args, parser) -> int:
    try:
        s = settings_from_args(args)
        if args.write_config:
            write_config(args.write_config, s, args.host, args.port)
            log.info("wrote %s", args.write_config)
            return 0
        check_state_free(s.state)
        check_port(args.host, args.port)
    except (ValueError, RunFolderError, RecommendError) as err:
        parser.error(str(err))
    return run_service(s, args.host, args.port, args.num_cpus, parser.prog)


if __name__ == "__main__":
    raise SystemExit(main())
