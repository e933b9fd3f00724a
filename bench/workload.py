"""What the benches run on, shared by bench.trainer, bench.step_profile and bench.overhead: length distributions
like the paper's datasets, real samples from a shard set, greedy token batches, the training step as the
trainer takes it, the FLOP cost model behind MFU, and the table printer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from common.presets import n_max as budget_of
from trainer.model.pencil import Pencil

# name -> (sampling (d, n), length generator). Mimic the context-size distributions of the paper's
# datasets: citeseer (2,20) is heavy-tailed (most subgraphs tiny, a few hub-centred ones near the 842
# budget); ogbl-collab (1,75) is the union of two capped 1-hop neighbourhoods.
DISTRIBUTIONS = {"citeseer(2,20)": (2, 20), "ogbl-collab(1,75)": (1, 75)}
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}  # dense bf16


# ---------------------------------------------------------------------------- samples
def synthetic_lengths(dist: str, count: int, rng: np.random.Generator) -> np.ndarray:
    d, n = DISTRIBUTIONS[dist]
    cap = budget_of(d, n)
    if dist.startswith("citeseer"):
        # lognormal, mean ~40 before clipping; P(N > 400) ~ 1%, the tail reaches the 842 budget
        N = np.exp(rng.normal(np.log(40) - 0.6, 1.1, count))
    else:
        # two roots, each keeps min(degree, 75) neighbours (heavy-tailed degrees, median 55), minus a
        # 0-6% overlap between the two neighbourhoods: mean ~100, max 152
        deg = np.exp(rng.normal(np.log(55), 0.9, (count, 2)))
        N = 2 + np.minimum(deg, n).sum(1) * (1 - rng.uniform(0, 0.06, count))
    return np.clip(np.rint(N), 2, cap).astype(np.int64)


def synthetic_samples(dist: str, count: int, seed: int = 0) -> list[dict]:
    """Samples with the distribution's lengths and ~2 N random local edges (never u-v)."""
    rng = np.random.default_rng(seed)
    out = []
    for i, N in enumerate(synthetic_lengths(dist, count, rng)):
        E = int(min(2 * N, N * (N - 1) // 2 - 1))
        a = rng.integers(0, N, max(E, 0))
        b = (a + 1 + rng.integers(0, N - 1, len(a))) % N  # b != a
        keep = ~(((a == 0) & (b == 1)) | ((a == 1) & (b == 0)))
        e = np.unique(np.sort(np.stack([a[keep], b[keep]], 1), 1), axis=0)  # each edge once
        out.append(dict(cid=i, src=0, dst=1, label=float(i % 2), nodes=np.arange(N), edges=e))
    return out


def shard_samples(shard_dir: str, count: int) -> tuple[str, int, list[dict]]:
    """Real samples from the training shards of a preprocessed set: (name, n_max, samples).
    Shard format v2 blocks carry node ids only; their induced edges come from the shipped train graph."""
    from common.shards import read_manifest, read_shard, shard_entries

    man = read_manifest(shard_dir)
    out = []
    inducer = None
    for entry in shard_entries(man, "train") or man.shards:
        for block in read_shard(Path(man.root) / entry["name"]):
            if isinstance(block, dict):  # format v1: one decoded sample per item
                out.append(block)
            else:
                if inducer is None:
                    from common.induce import Inducer
                    from common.shards import load_graph

                    inducer = Inducer(*load_graph(man, "train"))
                eptr, edges = inducer.edges(block.node_ptr, block.nodes)
                for b in range(len(block)):
                    out.append(
                        dict(
                            cid=int(block.cid[b]),
                            src=int(block.src[b]),
                            dst=int(block.dst[b]),
                            label=float(block.label[b]),
                            nodes=block.nodes[block.node_ptr[b] : block.node_ptr[b + 1]],
                            edges=edges[eptr[b] : eptr[b + 1]].astype(np.int64),
                        )
                    )
            if len(out) >= count:
                break
        if len(out) >= count:
            break
    s = man.sampling
    return f"{man.dataset or 'shards'}({s.get('d', '?')},{s.get('n', '?')})", man.n_max, out[:count]


def token_batches(samples: list[dict], budget: int) -> list[list[dict]]:
    """Greedy token-budgeted batches (N + 2 tokens per sample), in input order, as the loader does."""
    batches, cur, used = [], [], 0
    for s in samples:
        t = len(s["nodes"]) + 2
        if cur and used + t > budget:
            batches.append(cur)
            cur, used = [], 0
        cur.append(s)
        used += t
    return batches + ([cur] if cur else [])


# ---------------------------------------------------------------------------- cost model
def matmul_flops(model: Pencil, tokens: float) -> float:
    """Forward+backward FLOPs of the trainable weight matrices on `tokens` real tokens: 6 * params * tokens.
    W0 is a gather, not a matmul (and frozen), and is excluded."""
    return 6.0 * sum(p.numel() for p in model.parameters() if p.requires_grad and p.dim() == 2) * tokens


def attention_flops(model: Pencil, lengths: np.ndarray) -> float:
    """Forward+backward FLOPs of attention on samples of these lengths: 12 * layers * d * sum(L_b^2)
    (QK^T and PV, 2 L^2 d each, x3 for backward)."""
    return 12.0 * model.cfg.layers * model.cfg.hidden * float((lengths.astype(np.float64) ** 2).sum())


def step_flops(model: Pencil, lengths: np.ndarray) -> float:
    """Useful forward+backward FLOPs of one step on real tokens (padding excluded)."""
    return matmul_flops(model, float(lengths.sum())) + attention_flops(model, lengths)


def peak_flops(device: torch.device, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v * 1e12 for k, v in PEAK_TFLOPS.items() if k in name), None)


# ---------------------------------------------------------------------------- the step and the table
def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(model: Pencil, opt, device, amp: bool):
    """step(batch or list of chunks): forward+backward (accumulated over chunks, weighted to the batch mean)
    and one AdamW step, as the trainer does (fused AdamW on CUDA)."""

    def step(batch):
        chunks = batch if isinstance(batch, list) else [batch]
        total = sum(c.num_samples for c in chunks)
        opt.zero_grad(set_to_none=True)
        for c in chunks:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                loss = model.loss(model(c), c.label) * (c.num_samples / total)
            loss.backward()
        opt.step()

    return step


def print_table(title: str, columns: list[str], rows: list[list]) -> None:
    """Right-aligned columns; a shorter row (a path that failed: its reason in place of the times) prints its
    last cell as is, without widening the columns."""
    cells = [[str(c) for c in columns]] + [[str(c) for c in r] for r in rows]
    width = [max(len(r[i]) for r in cells if len(r) == len(columns)) for i in range(len(columns))]
    print(f"\n{title}")
    for k, r in enumerate(cells):
        if len(r) < len(columns):
            print("  ".join([c.rjust(w) for c, w in zip(r[:-1], width)] + [r[-1]]))
            continue
        print("  ".join(c.rjust(w) for c, w in zip(r, width)))
        if k == 0:
            print("  ".join("-" * w for w in width))
