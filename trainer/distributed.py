"""Process group, device and the few collectives the trainer needs.

Under torchrun (RANK / WORLD_SIZE / LOCAL_RANK set) a process group is created: NCCL on CUDA, gloo on
CPU. Without torchrun the trainer is a single process and no process group exists; every helper here
is then a no-op, so the training code has one path.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trainer.config_sections import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None  # None: single process, no process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.backend is not None


def check_ranks_per_gpu(local_world_size: int, gpus: int) -> None:
    """NCCL refuses two ranks on one GPU (and sharing one would only slow both): fail up front, in one
    line, instead of a NCCL error after start-up. Policy: one rank per GPU, or gloo on CPU."""
    if local_world_size > gpus:
        raise ConfigError(
            f"--nproc-per-node: {local_world_size} ranks on this node but {gpus} GPU(s); NCCL needs "
            f"one GPU per rank: use --nproc-per-node {gpus}, or --device cpu for gloo ranks"
        )


def resolve_device(name: str, local_rank: int, local_world_size: int = 1) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "--device: cuda requested but CUDA is not available on this machine; use --device cpu or auto"
        )
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        check_ranks_per_gpu(local_world_size, torch.cuda.device_count())
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init_distributed(device: str = "auto") -> DistInfo:
    """Read torchrun's environment, pick the device, create the process group when launched by torchrun."""
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    rank = int(os.environ.get("RANK", 0)) if launched else 0
    world = int(os.environ.get("WORLD_SIZE", 1)) if launched else 1
    local_rank = int(os.environ.get("LOCAL_RANK", 0)) if launched else 0
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world)) if launched else 1
    dev = resolve_device(device, local_rank, local_world)
    backend = None
    if launched:
        backend = "nccl" if dev.type == "cuda" else "gloo"
        if not dist.is_initialized():
            dist.init_process_group(backend=backend)
        backend = dist.get_backend()
    return DistInfo(rank, world, local_rank, dev, backend)


def cleanup() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _comm_device(info: DistInfo) -> torch.device:
    # NCCL only moves CUDA tensors; gloo only CPU ones.
    return info.device if info.backend == "nccl" else torch.device("cpu")


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum over ranks (returns a new tensor on t's device)."""
    if not info.is_distributed:
        return t
    x = t.to(_comm_device(info)).clone()
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x.to(t.device)


def all_gather_cat(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Concatenate a 1-D tensor of any per-rank length over ranks (rank order)."""
    if not info.is_distributed:
        return t
    dev = _comm_device(info)
    x = t.to(dev)
    n = torch.tensor([x.shape[0]], device=dev, dtype=torch.int64)
    sizes = [torch.zeros_like(n) for _ in range(info.world_size)]
    dist.all_gather(sizes, n)
    sizes_i = [int(s.item()) for s in sizes]
    pad = torch.zeros(max(sizes_i), dtype=x.dtype, device=dev)
    pad[: x.shape[0]] = x
    out = [torch.empty_like(pad) for _ in range(info.world_size)]
    dist.all_gather(out, pad)
    return torch.cat([o[:k] for o, k in zip(out, sizes_i)]).to(t.device)


def all_gather_object(obj, info: DistInfo) -> list:
    if not info.is_distributed:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj, info: DistInfo, src: int = 0):
    if not info.is_distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier(info: DistInfo) -> None:
    if info.is_distributed:
        if info.backend == "nccl":
            dist.barrier(device_ids=[info.device.index])
        else:
            dist.barrier()
