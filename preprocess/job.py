"""Ray orchestration: candidates -> one task per shard -> tars + queries -> manifest (written last).

Run modes: with RAY_ADDRESS unset an embedded single-machine Ray is started (num_cpus honoured);
with RAY_ADDRESS set (`ray job submit` sets it) the driver attaches to that cluster.

Cache and resume: the output directory is OUT/<dataset>/<cache key>. A complete manifest there means
the work is done and nothing is sampled. Otherwise every shard task first looks for its own file; a
readable one (left by a killed run: files appear only through an atomic rename) is kept and only its
stats are re-read. Shard content depends only on (config, seed, shard identity), so a resumed set is
byte-identical to an uninterrupted one.

Memory: a shard task streams its blocks into the shard file (one block in flight) and the blocks hold
node ids only (format v2), so a task's footprint is its worker, the mapped graph and one block;
--worker-memory-mb (default 1500) is checked against that estimate up front and given to Ray as the
task's memory resource. Shards close at --links-per-shard or when their worst case passes --shard-mb.

Storage goes through common.storage.open_storage (exists / open_read / writer / remove), so a
remote backend plugs in there without touching the sampler or this orchestration.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.memory import peak_rss_mb
from common.shards import MANIFEST, Block, ShardError, ShardWriter, cache_key, file_record, open_storage, write_manifest
from common.storage import absolute_location
from preprocess.cluster import init_ray, probe_address
from preprocess.config import ConfigError, PreprocessConfig
from preprocess.integrity import shard_stats, verify_cached  # noqa: F401  (shard_stats: public re-export)
from preprocess.plan import candidate_sets, plan_shards, resolve_protocols
from preprocess.sampler import Scratch, derive_seed, sample_subgraphs
from preprocess.set_files import manifest_fields, planned_records, remove_strays, set_files
from preprocess.targets import label_with_targets

log = logging.getLogger(__name__)

TASK_RETRIES = 3


@dataclass
class JobResult:
    path: Path  # the shard directory (local output)
    cached: bool  # True: a complete set was found and nothing was sampled
    summary: dict = field(default_factory=dict)
    location: str = ""  # the same directory as a string/URL (what a remote backend would be given)


# ---------------------------------------------------------------------------- shard task (runs on a worker)
@dataclass(frozen=True)
class ShardTask:
    """One shard's work besides its arrays: links [start, stop) of its candidate set, sampled with (d, n) from
    `seed`, `links_per_block` to a block, written as `name` under `storage_url` (`force`: never reuse it);
    `n_max`: the set's node budget, checked on reuse; `closest`: the sampler's per-link cap (0 = off)."""

    start: int
    stop: int
    d: int
    n: int
    seed: int
    links_per_block: int
    storage_url: str
    name: str
    force: bool
    n_max: int = 0
    closest: int = 0


def build_shard(indptr, indices, src, dst, label, task: ShardTask, rel=None) -> dict:
    """Sample links [start, stop) of one candidate set into one shard, streaming: each block is encoded
    and written as soon as it is sampled, so the task holds one block, never the whole shard. The arrays stay
    arguments of their own, so Ray hands a worker each one from the object store without a copy.

    A shard left by an earlier (killed) run is reused only if it holds exactly this plan's links, every
    block passes the range checks, and re-encoding its blocks reproduces its bytes; otherwise it is
    sampled again and the returned record carries a one-line `note` naming it. `rel`: a typed set's relation of
    every candidate, written beside each link (format version 4)."""
    storage, name = open_storage(task.storage_url), task.name
    note = None
    if not task.force and storage.exists(name):
        try:
            expect = {
                "start": task.start,
                "stop": task.stop,
                "src": src,
                "dst": dst,
                "label": label,
                "rel": rel,
                "num_nodes": int(indptr.shape[0] - 1),
                "n_max": task.n_max,
            }
            return {**shard_stats(storage, name, expect), "name": name, "reused": True, "peak_rss_mb": peak_rss_mb()}
        except ShardError as err:
            note = str(err).split("; rerun preprocess")[0]  # this run is the rerun: it samples the shard again
    try:
        stats = _sample_into(storage, name, (indptr, indices), (src, dst, label, rel), task)
    except OSError as err:
        if err.errno not in FATAL_ERRNOS:
            raise  # transient: Ray retries the task
        # A full disk or a read-only/forbidden folder will not heal on retry: report it, don't retry it.
        return {"name": name, "fatal": [err.errno, os.strerror(err.errno), err.filename or storage.path(name)]}
    return {**stats, "name": name, "reused": False, "peak_rss_mb": peak_rss_mb(), "note": note}


# OS errors a retry cannot fix; the task returns them instead of raising (no retries, no worker traceback).
FATAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR)


def _sample_into(storage, name, graph: tuple, links: tuple, task: ShardTask) -> dict:
    """`graph`: (indptr, indices); `links`: (src, dst, label, rel or None) of the candidate set."""
    (indptr, indices), (src, dst, label, rel) = graph, links
    scratch, start, stop, step = Scratch(indptr), task.start, task.stop, task.links_per_block
    with storage.writer(name) as f:
        writer = ShardWriter(f)
        for b, lo in enumerate(range(start, stop, step)):
            hi = min(lo + step, stop)
            sub = sample_subgraphs(
                indptr,
                indices,
                src[lo:hi],
                dst[lo:hi],
                task.d,
                task.n,
                derive_seed(task.seed, b),
                shuffle=True,
                scratch=scratch,
                closest=task.closest,
            )
            writer.add(
                Block(
                    cid=np.arange(lo, hi, dtype=np.int64),
                    src=src[lo:hi],
                    dst=dst[lo:hi],
                    label=label[lo:hi],
                    node_ptr=sub.node_ptr,
                    nodes=sub.nodes,
                    rel=None if rel is None else rel[lo:hi],
                )
            )
        return writer.close()


def shard_dir(config: PreprocessConfig, dataset_name: str, key: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(dataset_name).name) or "dataset"
    return f"{str(config.out).rstrip('/')}/{safe}/{key}"


# ---------------------------------------------------------------------------- the job
def run(config: PreprocessConfig, dataset=None) -> Path:
    """Build (or find) the shard set of `config`; returns OUT/<dataset>/<key>."""
    return run_job(config, dataset).path


def run_job(config: PreprocessConfig, dataset=None, verify: bool = True, keep_ray: bool = False) -> JobResult:
    """Build or find the set. On a cache hit the manifest is checked (schema, checksum, against the plan)
    and every file against it (size always, sha256 unless verify=False); whatever is bad is named and
    rebuilt: bad shards sampled again, other files rewritten, the manifest written anew. `keep_ray`: an
    embedded Ray this job starts stays up after a success, for the caller's next set (the caller shuts it
    down); a failed job shuts it down all the same."""
    t0 = time.perf_counter()
    if os.environ.get("RAY_ADDRESS"):
        probe_address(os.environ["RAY_ADDRESS"])  # a dead cluster fails in one line, before anything is loaded
    if dataset is None:
        dataset = config.load_dataset()
    if config.ships_features and dataset.x is None:  # before anything is written
        flag = "--features" if config.data.features else "--node-features"
        raise ConfigError(
            f"{flag}: dataset {dataset.name} has no node features (Planetoid datasets need "
            "--planetoid-dir; OGB ones need node-feat in the root; an edge list's come with "
            "--node-features FILE)"
        )
    protocols = resolve_protocols(config, dataset)
    fingerprint = dataset.fingerprint()  # hashes every split array: compute it once
    key = cache_key(config.key_parts(fingerprint, protocols))
    out = shard_dir(config, dataset.name, key)
    storage = open_storage(out)

    # The plan comes first, even for a cache hit: a finished set is trusted only if its manifest agrees with it.
    sets = candidate_sets(config, dataset, protocols)
    targets = None
    if config.targets:  # heuristic estimation: labels become the normalised heuristic of each pair
        sets, targets = label_with_targets(config.targets, dataset, sets)
    graphs = {k: dataset.graph_for("test" if k == "test" else "train") for k in sorted({cs.graph for cs in sets})}
    plans = plan_shards(config, sets, dataset.num_nodes)
    meta = manifest_fields(config, dataset, fingerprint, protocols, (sets, plans), graphs, targets)
    if storage.exists(MANIFEST) and not config.force:
        expected = {
            **meta,
            "shards": planned_records(sets, plans),
            "files": {name: file_record(data) for name, data in set_files(config, dataset, sets, graphs)},
        }
        if verify_cached(storage, expected, verify):
            log.info("cache complete: %s already holds a finished shard set; sampling nothing", out)
            return JobResult(Path(out), cached=True, location=out)
        storage.remove(MANIFEST)  # incomplete until the bad files are written again below
    if config.force:
        storage.remove(MANIFEST)  # a killed forced run must not look complete

    check_worker_memory(config, graphs)
    storage.cleanup_tmp()  # temporary files of a killed earlier run
    log.info(
        "%s: %d candidate sets, %d links in %d shards -> %s (shards finished by an earlier run are kept)",
        dataset.name,
        len(sets),
        sum(len(cs.cands) for cs in sets),
        len(plans),
        out,
    )
    files = {}
    for name, data in set_files(config, dataset, sets, graphs):  # one file in memory at a time
        storage.write_atomic(name, data)
        files[name] = file_record(data)
    remove_strays(storage, {p.name for p in plans} | set(files))
    try:
        records, summary = execute_plan(config, graphs, sets, plans, out, keep_ray)
    except BaseException:
        # Ray killed in-flight tasks before their writers could remove their temporary files.
        storage.cleanup_tmp()
        raise
    # A worker killed mid-write leaves its temporary file even when Ray's retry then finished the shard.
    storage.cleanup_tmp()
    summary["seconds"] = round(time.perf_counter() - t0, 3)
    summary["worker_memory_mb"] = config.worker_memory_mb
    write_manifest(
        storage,
        {
            **meta,
            "shards": records,
            "files": files,
            "totals": {k: sum(r[k] for r in records) for k in ("links", "tokens", "bytes")},
        },
    )
    _log_summary(summary, out)
    return JobResult(Path(out), cached=False, summary=summary, location=out)


# A Ray worker's own footprint (interpreter, numpy, numba, pyarrow, ray), measured on this project's
# machines at 250-350 MB; the budget must hold it plus what the task allocates.
WORKER_BASE_MB = 350


def task_memory_mb(config: PreprocessConfig, graph) -> float:
    """Worst-case resident memory of one shard task: worker base + the mapped graph + the sampler's
    marker/stamp arrays + one block in flight (int64 ids at N_max per link, ~4 live copies while
    sampling, Arrow-encoding and compressing it)."""
    graph_mb = (graph.indptr.nbytes + graph.indices.nbytes) / 2**20
    scratch_mb = (4 * graph.num_nodes + 8 * max(1, int(graph.degree.max(initial=1)))) / 2**20
    block_mb = 4 * 8 * config.links_per_block * config.sampling.n_max / 2**20
    return WORKER_BASE_MB + graph_mb + scratch_mb + block_mb


def check_worker_memory(config: PreprocessConfig, graphs: dict) -> None:
    need = max(task_memory_mb(config, g) for g in graphs.values())
    if need > config.worker_memory_mb:
        raise ConfigError(
            f"--worker-memory-mb {config.worker_memory_mb}: one shard task needs about {need:.0f} MB "
            f"here (worker {WORKER_BASE_MB} MB + graph + one block of {config.links_per_block} links "
            f"at N_max {config.sampling.n_max}); raise it or lower --block-size"
        )


def execute_plan(
    config: PreprocessConfig, graphs: dict, sets, plans, out: str, keep_ray: bool = False
) -> tuple[list[dict], dict]:
    """Run one Ray task per shard with bounded in-flight work; returns shard records and totals."""
    import ray
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    started, finished = init_ray(config.num_cpus), False
    # A worker's folder is the one Ray started in, not the driver's now: a relative --out must not reach it as such
    out = absolute_location(out)
    try:
        # memory= makes Ray place no more tasks on a node than their budgets fit in its memory.
        task = ray.remote(max_retries=TASK_RETRIES, retry_exceptions=[OSError], memory=config.worker_memory_mb * 2**20)(
            build_shard
        )
        # The graph and candidate arrays enter the object store once; workers map them zero-copy.
        graph_refs = {k: (ray.put(g.indptr), ray.put(g.indices)) for k, g in graphs.items()}
        set_refs = [(ray.put(cs.cands.src), ray.put(cs.cands.dst), ray.put(cs.cands.label)) for cs in sets]
        rel_refs = [() if cs.cands.rel is None else (ray.put(cs.cands.rel),) for cs in sets]  # a typed set's
        max_in_flight = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        d, n, n_max = config.sampling.d, config.sampling.n, config.sampling.n_max
        pending, results, t0 = {}, [], time.perf_counter()
        todo = list(plans)
        bar = tqdm(
            total=sum(p.stop - p.start for p in plans),
            unit="link",
            unit_scale=True,
            smoothing=0.1,
            desc="sampling",
            mininterval=1.0,
            disable=not log.isEnabledFor(logging.INFO),
        )  # off under -q
        while todo or pending:
            while todo and len(pending) < max_in_flight:
                p = todo.pop(0)
                cs = sets[p.set_index]
                work = ShardTask(
                    p.start,
                    p.stop,
                    d,
                    n,
                    p.seed,
                    config.links_per_block,
                    out,
                    p.name,
                    config.force,
                    n_max,
                    config.sampling.closest,
                )
                ref = task.remote(*graph_refs[cs.graph], *set_refs[p.set_index], work, *rel_refs[p.set_index])
                pending[ref] = p
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                p = pending.pop(ref)
                stats = ray.get(ref)
                if stats.get("fatal"):
                    # Let the tasks in flight end on their own (on a full disk they fail fast too) before
                    # Ray shuts down: a worker killed mid-write prints to the user's terminal.
                    ray.wait(list(pending), num_returns=len(pending), timeout=60)
                    raise OSError(*stats["fatal"])
                if stats.get("note"):
                    with logging_redirect_tqdm():  # its own line, not appended to the progress bar
                        log.warning("%s; sampled it again", stats["note"])
                cs = sets[p.set_index]
                results.append({**stats, "split": cs.split, "protocol": cs.protocol, "view": cs.view})
                bar.update(stats["links"])
        elapsed, finished = time.perf_counter() - t0, True
    finally:
        if "bar" in locals():
            bar.close()  # before any error line: the bar must not be redrawn after it
        if started and not (keep_ray and finished):
            ray.shutdown()
    return _records(results), _totals(results, elapsed)


def _records(results: list[dict]) -> list[dict]:
    keep = ("name", "split", "protocol", "view", "links", "tokens", "blocks", "bytes", "sha256")  # not "note"
    return sorted(({k: r[k] for k in keep} for r in results), key=lambda r: r["name"])


def _totals(results: list[dict], elapsed: float) -> dict:
    sampled = [r for r in results if not r["reused"]]
    links = sum(r["links"] for r in sampled)
    return {
        "shards": len(results),
        "shards_sampled": len(sampled),
        "shards_reused": len(results) - len(sampled),
        "links": sum(r["links"] for r in results),
        "links_sampled": links,
        "tokens": sum(r["tokens"] for r in results),
        "bytes": sum(r["bytes"] for r in results),
        "sampling_seconds": round(elapsed, 3),
        "links_per_second": round(links / elapsed, 1) if elapsed else 0.0,
        "worker_peak_rss_mb": round(max((r["peak_rss_mb"] for r in results), default=0.0), 1),
    }


def _log_summary(s: dict, out: str) -> None:
    if s.get("worker_memory_mb") and s["worker_peak_rss_mb"] > s["worker_memory_mb"]:
        log.warning(
            "a shard task peaked at %.0f MB, over --worker-memory-mb %d; raise it (Ray schedules by it)",
            s["worker_peak_rss_mb"],
            s["worker_memory_mb"],
        )
    log.info(
        "done: %d links (%d sampled, %d shards reused of %d), %d tokens, %.1f MB in %.1f s "
        "(sampling %.1f s, %.0f links/s), worker peak RSS %.0f MB",
        s["links"],
        s["links_sampled"],
        s["shards_reused"],
        s["shards"],
        s["tokens"],
        s["bytes"] / 1e6,
        s["seconds"],
        s["sampling_seconds"],
        s["links_per_second"],
        s["worker_peak_rss_mb"],
    )
