"""The Ray Serve side of `pencil serve`: two Serve applications, built from plain dicts of settings.

- GRAPH_APP ("pencil-graph"), deployment GraphOwner: one replica, on the head node. It owns the edit log
  (pipelines/serve/edit_log.py) and the copy of the graph that validates edits; an edit is durable before
  it is acknowledged. Not exposed over HTTP.
- SERVICE_APP ("pencil"), deployment Scorer: N replicas behind the HTTP proxy at "/", each with the model
  (a GPU each where the cluster has them) and its own copy of the graph. Before every batch a replica asks
  the owner for the edits it has not applied (on the owner's node, only once the log has grown) and applies
  them in order, so an acknowledged edit is seen by every later request on every replica.

Concurrent requests to one replica are batched (Serve's @serve.batch, a bounded wait) into one retrieval
and one forward pass, and the batches that queue while the model works are merged (pipelines/serve/coalesce.py);
the work runs on one thread beside the event loop, which keeps accepting requests.
`graph_app` and `service_app` take the same settings as the command's flags, so `serve run` and `serve
deploy` with a config file (`pencil serve --write-config`) build exactly what the command runs. A new
checkpoint changes only the service application's settings: Serve starts the new replicas, and the old ones
drain (a rolling update), while the graph owner and its log stay up.
"""

import asyncio
import contextlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from ray import serve
from ray.serve.metrics import Counter, Histogram
from starlette.exceptions import HTTPException as StarletteHTTPException

from common.cli import describe
from pipelines.serve.coalesce import Coalescer
from pipelines.serve.handlers import NO_TOKEN, Limits, check_token, edit_size, parse_json, recommend_query, score_body
from pipelines.serve.settings import Settings
from pipelines.serve.state import ServeError, serving_state

log = logging.getLogger("ray.serve")
GRAPH_APP, SERVICE_APP = "pencil-graph", "pencil"
OWNER = "GraphOwner"
LATENCY_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]


@serve.deployment(
    name=OWNER,
    num_replicas=1,
    max_ongoing_requests=1000,
    ray_actor_options={"num_cpus": 0, "resources": {"node:__internal_head__": 0.001}},
)
class GraphOwner:
    """The one writer of the edit log; replicas read the edits back with `since`."""

    def __init__(self, settings: dict):
        from common.shards import read_manifest
        from pipelines.core.runs import run_dataset
        from pipelines.serve.edit_log import EditLog
        from pipelines.serve.start import dropped_line

        s = Settings.from_dict(settings)
        dataset = run_dataset(read_manifest(s.shards), s.dataset)  # checked to be the run's graph, as the replicas'
        self.state, described = serving_state(dataset, s.graph, s.max_new_nodes, s.features)
        self.log = EditLog(s.state, described)
        self.state.apply(self.log.records)
        self.lock = asyncio.Lock()
        log.info(
            "graph owner: %s, %d edits replayed from %s%s",
            described["source"],
            self.state.seq,
            self.log.path,
            f"; a torn last line of {self.log.torn} bytes (an edit never acknowledged) dropped"
            if self.log.torn
            else "",
        )
        if self.state.dropped:
            log.warning("%s", dropped_line(self.log.path, self.state.dropped))

    async def edit(self, body) -> dict:
        async with self.lock:  # one edit at a time: seq numbers and the log's order are the same
            try:
                return await asyncio.to_thread(self._edit, body)
            except ServeError as err:
                return {"status": err.status, "error": err.message}

    def _edit(self, body) -> dict:
        record = {"seq": self.state.seq + 1, **self.state.edit_record(body)}
        try:
            self.log.append(record)
        except OSError as err:
            raise ServeError(503, f"the edit was not saved, nothing changed: {describe(err)}") from None
        self.state.apply([record])
        return self.state.summary()

    async def since(self, seq: int) -> dict:
        """The edits after `seq`, and where a replica on this node can watch the log grow instead of asking."""
        import ray

        return {
            "fingerprint": self.state.base_fingerprint,
            "records": self.log.records[seq:],
            "log": str(self.log.path),
            "size": self.log.size,
            "node": ray.get_runtime_context().get_node_id(),
        }


api = FastAPI(title="PENCIL link prediction", docs_url=None, redoc_url=None, openapi_url=None)


def error_response(err: ServeError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


@api.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Unknown routes and wrong methods: the same one-line JSON as every other error."""
    return error_response(ServeError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}"))


@api.exception_handler(RequestValidationError)
async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    first = (exc.errors() or [{}])[0]
    where = ".".join(str(x) for x in first.get("loc", ()))
    return error_response(ServeError(400, f"{where}: {first.get('msg', 'invalid request')}"))


@serve.deployment(name="Scorer", max_ongoing_requests=128, max_surge_percent=100, health_check_period_s=5)
@serve.ingress(api)
class Scorer:
    """A model replica: every endpoint of the service."""

    def __init__(self, settings: dict):
        import torch

        from pipelines.core.runs import load_run
        from pipelines.recommend.engine import RecConfig
        from pipelines.serve.handlers import Engine
        from trainer.scoring import default_device

        s = self.settings = Settings.from_dict(settings)
        torch.set_num_threads(max(1, int(s.replica_cpus)))  # the replica's cores; Ray sets OMP threads to them
        device = default_device(s.device)
        model, dataset, fields, self.digest = load_run(s.checkpoint, device, dataset=s.dataset, shards=s.shards or None)
        if bool(model.cfg.num_features) != s.features:  # the graph owner built its graph by this setting
            raise ValueError(
                f"{s.checkpoint}: its model {'reads' if model.cfg.num_features else 'reads no'} node "
                f"features, but the setting 'features' is {s.features}; set it to "
                f"{not s.features} (pencil serve --write-config writes it)"
            )
        state, self.described = serving_state(dataset, s.graph, s.max_new_nodes, s.features)
        cfg = RecConfig(
            k=s.k,
            pool=s.pool,
            retriever=s.retriever,
            orderings=s.orderings,
            seed=s.seed,
            token_budget=s.token_budget,
            batch_size=s.batch_size,
            prior_weight=s.prior_weight,
            **fields,
        )
        self.engine = Engine(model, state, cfg, device)
        self.limits = Limits(s.max_pairs, s.max_edges, s.max_k, s.max_pool, s.max_body_bytes)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pencil")  # the model's one thread
        self.engine.warm_up()
        self.owner = self.local_log = self.log_size = None
        self.recommend_queue = Coalescer(self._recommend_all, s.max_batch)
        self.score_queue = Coalescer(self._score_all, s.max_batch)
        for method in (self._recommend_batch, self._score_batch):
            method.set_max_batch_size(s.max_batch)
            method.set_batch_wait_timeout_s(s.batch_wait_ms / 1000.0)
        self.latency = Histogram(
            "pencil_serve_latency_ms",
            description="request latency by endpoint (ms)",
            boundaries=LATENCY_MS,
            tag_keys=("endpoint", "status"),
        )
        self.requests = Counter(
            "pencil_serve_requests", description="requests by endpoint and status", tag_keys=("endpoint", "status")
        )
        self.pairs = Counter(
            "pencil_serve_pairs_scored", description="pairs scored by the model", tag_keys=("endpoint",)
        )
        log.info("replica ready: %s on %s, %s", s.checkpoint, device, self.described["source"])

    # -------------------------------------------------------------- plumbing
    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def _sync(self) -> None:
        """Bring this replica's graph up to the log: after this, every acknowledged edit is applied. On the
        owner's node the log's size tells whether anything was appended (a stat, not a call): an edit is
        appended before it is acknowledged, so a request that follows an acknowledgement sees the growth."""
        if self.local_log is not None:
            with contextlib.suppress(OSError):
                if os.stat(self.local_log).st_size == self.log_size:
                    return
        try:
            if self.owner is None:
                self.owner = serve.get_deployment_handle(OWNER, app_name=self.settings.graph_app)
            reply = await self.owner.since.remote(self.engine.state.seq)
        except Exception as err:  # noqa: BLE001 - without the owner, no answer can promise the latest graph
            raise ServeError(
                503, f"the graph owner ({self.settings.graph_app}) is unavailable: {describe(err)}"
            ) from None
        if reply["fingerprint"] != self.engine.state.base_fingerprint:
            raise ServeError(
                503,
                "the graph owner serves another graph than this replica's checkpoint; deploy "
                "both applications with the same --graph and a checkpoint of the same shard set",
            )
        if reply["records"]:
            await self._run(self.engine.apply, reply["records"])
        import ray

        same_node = reply["node"] == ray.get_runtime_context().get_node_id()
        self.local_log, self.log_size = (reply["log"] if same_node else None), reply["size"]

    async def _answer(self, endpoint: str, work) -> JSONResponse:
        """Run one request's coroutine: its JSON, or its error as one line; latency and status recorded."""
        start = time.perf_counter()
        try:
            response = JSONResponse(await work)
        except ServeError as err:
            response = error_response(err)
        except Exception as err:  # noqa: BLE001 - a client gets one line, the log keeps the traceback
            log.exception("%s failed", endpoint)
            response = error_response(ServeError(500, f"internal error: {describe(err)}"))
        tags = {"endpoint": endpoint, "status": str(response.status_code)}
        self.latency.observe((time.perf_counter() - start) * 1000.0, tags=tags)
        self.requests.inc(1, tags=tags)
        return response

    async def _body(self, request: Request):
        """The request's JSON, read with a bound on its size (413 past it)."""
        limit = self.limits.max_body_bytes
        if int(request.headers.get("content-length") or 0) > limit:
            raise ServeError(413, f"request body too large: over {limit} bytes")
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > limit:
                raise ServeError(413, f"request body too large: over {limit} bytes")
        return parse_json(bytes(data))

    # -------------------------------------------------------------- batches
    async def _recommend_all(self, queries: list) -> list:
        await self._sync()
        results, pairs = await self._run(self.engine.recommend, queries)
        if pairs:  # a Counter refuses 0
            self.pairs.inc(pairs, tags={"endpoint": "recommend"})
        return results

    async def _score_all(self, requests: list) -> list:
        await self._sync()
        results, pairs = await self._run(self.engine.score, requests)
        if pairs:
            self.pairs.inc(pairs, tags={"endpoint": "score"})
        return results

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002, max_concurrent_batches=64)
    async def _recommend_batch(self, queries: list) -> list:
        return await self.recommend_queue.submit(queries)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002, max_concurrent_batches=64)
    async def _score_batch(self, requests: list) -> list:
        return await self.score_queue.submit(requests)

    @staticmethod
    def _raise_if_error(result):
        if isinstance(result, ServeError):
            raise result
        return result

    # -------------------------------------------------------------- endpoints
    @api.get("/recommend/{node:path}")
    async def recommend(self, node: str, request: Request) -> JSONResponse:
        async def work():
            query = recommend_query(node, request.query_params, self.engine.cfg, self.limits, self.engine.state.typed)
            return self._raise_if_error(await self._recommend_batch(query))

        return await self._answer("recommend", work())

    @api.post("/score")
    async def score(self, request: Request) -> JSONResponse:
        async def work():
            pairs = score_body(await self._body(request), self.limits, self.engine.state.typed)
            return self._raise_if_error(await self._score_batch(pairs))

        return await self._answer("score", work())

    @api.post("/edges")
    async def edges(self, request: Request) -> JSONResponse:
        async def work():
            check_token(request.headers.get("authorization"), self.settings.token_sha256)
            body = await self._body(request)
            edit_size(body, self.limits)
            await self._sync()  # also finds the owner
            reply = await self.owner.edit.remote(body)
            if "error" in reply:
                raise ServeError(reply["status"], reply["error"])
            await self._sync()  # this replica answers with the edit applied; the others before their next batch
            return reply

        return await self._answer("edges", work())

    @api.get("/neighbors/{node:path}")
    async def neighbors(self, node: str) -> JSONResponse:
        async def work():
            await self._sync()
            return await self._run(self.engine.neighbors, node)

        return await self._answer("neighbors", work())

    @api.get("/health")
    async def health(self) -> JSONResponse:
        async def work():
            await self._sync()
            return {
                "status": "ready",
                **self.engine.state.summary(),
                "checkpoint": self.digest,
                "graph": self.described["source"],
                "pid": os.getpid(),
            }

        return await self._answer("health", work())


def graph_app(config: dict):
    """`serve run` / `serve deploy` import path of the graph owner: pipelines.serve.app:graph_app; `config`: the
    config file's `args` of the application."""
    s = Settings.from_dict(config)
    s.check_run()  # a run that cannot load fails the application here, once, not in retried replicas
    return GraphOwner.bind(s.owner_dict())


def service_app(config: dict):
    """`serve run` / `serve deploy` import path of the model replicas: pipelines.serve.app:service_app; `config`:
    the config file's `args` of the application."""
    s = Settings.from_dict(config).with_token()
    s.check_run()  # as graph_app
    if s.token_sha256 is None:
        log.warning(NO_TOKEN)
    options = {"num_cpus": s.replica_cpus}
    if s.device != "cpu" and cluster_gpus() > 0:
        options["num_gpus"] = 1
    return Scorer.options(
        num_replicas=s.replicas, ray_actor_options=options, max_ongoing_requests=4 * s.max_batch
    ).bind(s.service_dict())


def cluster_gpus() -> int:
    import ray

    return int(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0
