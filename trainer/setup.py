"""Process set-up around a training run: logging, autocast, seeds, CPU threads, and the checks that must
pass before any heavy set-up (so a bad flag costs a second and one line, not a process group and a model).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from common import heap
from common.manifest_record import Manifest
from common.outputs import OutputError, check_output_folder
from common.shards import ShardError, read_manifest
from common.verify import set_problems
from trainer import distributed
from trainer.config import TrainConfig
from trainer.config_sections import ConfigError
from trainer.evaluate import eval_entry

log = logging.getLogger("trainer")


def setup_logging(info: distributed.DistInfo) -> None:
    """INFO from rank 0 only; other ranks warn and error."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(format=f"%(asctime)s [rank {info.rank}] %(levelname)s %(name)s: %(message)s")
    logging.getLogger("trainer").setLevel(logging.INFO if info.is_main else logging.WARNING)


def autocast_for(device: torch.device):
    """bf16 autocast on CUDA (weights stay fp32); plain fp32 on CPU."""
    if device.type == "cuda":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def cpu_threads(requested: int, local_world_size: int) -> int:
    """Intra-op threads for a CPU rank. Default: half the cores this process may use, split over the node's
    ranks, at least 1. The other half is for loader workers and the OS: OpenMP threads that share cores
    with busy processes spin at every barrier, and PENCIL's small matmuls gain little from threads
    (measured on the shared 2-core box under a load average of ~8, citeseer-small, one epoch: 2 threads
    took 91 s of CPU / 241 s wall, 1 thread 13 s / 40 s)."""
    if requested:
        return requested
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // (2 * max(1, local_world_size)))


@contextlib.contextmanager
def torch_settings(config: TrainConfig, info: distributed.DistInfo):
    """The process-wide torch settings of a run (determinism, CPU threads, TF32 on CUDA), restored on exit:
    tests call trainer.train.run() in-process, then compare in fp32."""
    precision, cudnn_tf32, threads = (
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.allow_tf32,
        torch.get_num_threads(),
    )
    if config.deterministic:
        # cuBLAS reads this when its handle is created (the first CUDA matmul), so set it first
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)  # warn where no deterministic kernel exists
    if info.device.type == "cpu":
        torch.set_num_threads(cpu_threads(config.threads, int(os.environ.get("LOCAL_WORLD_SIZE", info.world_size))))
    if info.device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32 matmuls in training (evaluation switches to fp32)
        torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = cudnn_tf32
        torch.set_num_threads(threads)
        if config.deterministic:
            torch.use_deterministic_algorithms(False)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


def check_run(config: TrainConfig, manifest: Manifest | None = None) -> Manifest:
    """Validate what a run needs before any heavy set-up (process group, model, loaders): the output folder,
    the shard set's manifest and that it holds the requested eval sets. Returns the manifest.
    Raises ConfigError / ShardError with one-line messages naming the flag or file."""
    out = Path(config.out)
    if "://" not in config.out:
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out: {out} exists and is a file; the run directory must be a folder")
        parent = next((p for p in out.parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise ConfigError(f"--out: {parent} is a file, so {out} cannot be created; choose another folder")
        try:  # never the shard set itself, nor inside it or inside another run (a recipe's results tree holds runs)
            check_output_folder(out, "--out", itself="run", within=("results",))
        except OutputError as err:
            raise ConfigError(str(err)) from None
    if config.compile:
        from trainer.model.pencil import compile_refusal

        if refusal := compile_refusal():
            raise ConfigError(refusal)
    manifest = manifest or read_manifest(config.data.shards)  # schema and checksum: always
    # Every file the loader reads must be there at its recorded size (a stat each); --verify also reads it
    # whole for its sha256. A bad set stops here, in one line, not at the epoch that reads the bad file.
    if problems := set_problems(manifest, checksums=config.verify):
        kind, where, problem = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        flag = "--verify: " if config.verify else ""
        raise ShardError(f"{flag}{where}: {problem}{more}; rerun preprocess with the same flags to repair the set")
    if config.verify:
        log.info(
            "--verify: %d shards and %d other files match the manifest's sha256",
            len(manifest.shards),
            len(manifest.files),
        )
    for split in config.eval_splits:
        try:
            eval_entry(manifest, split, config.protocol)
        except Exception as err:  # ShardError: re-raised naming the flag
            raise ConfigError(f"--protocol {config.protocol}: {err}") from None
    return manifest


def build_model(config: TrainConfig, preset, manifest: Manifest, info: distributed.DistInfo, ckpt: dict | None):
    """(the model to call, DDP-wrapped when distributed; its core) on the run's device, from the checkpoint
    when resuming."""
    from trainer.model.pencil import model_for_shards

    if preset.n_max != manifest.n_max:
        log.warning(
            "preset %s expects N_max %d but the shards have %d; the model follows the shards",
            preset.name,
            preset.n_max,
            manifest.n_max,
        )
    seed_everything(config.seed)  # identical init everywhere (DDP also broadcasts rank 0's)
    core = model_for_shards(preset, config.model.as_overrides(), manifest)
    if ckpt:
        core.load_state_dict(ckpt["model"])
    core.to(info.device)
    # the backend for the device this run uses (the model resolves for CUDA whenever CUDA exists)
    core.attention_backend = core._backend(info.device.type)
    # glibc keeps what varied batch shapes free; give it back (docs/benchmarks/2026-12-05-trainer-memory.md)
    if trim := heap.policy(info.device.type):
        core.register_forward_pre_hook(trim)
    if config.compile:
        core.compile_blocks()  # in place: DDP below and checkpoints see the same parameters and names
    seed_everything(config.seed + 1_000_003 * (info.rank + 1))  # distinct dropout per rank
    model = core
    if info.is_distributed:
        # No per-step buffer broadcast: the only buffer is the attached feature table, identical on
        # every rank (it is data), and re-sending it each step would cost a full copy per forward.
        # gradient_as_bucket_view: gradients live in the all-reduce buckets (no copy in and out per step)
        model = DDP(
            core,
            device_ids=[info.device.index] if info.device.type == "cuda" else None,
            broadcast_buffers=False,
            gradient_as_bucket_view=True,
        )
    return model, core
