"""One BertLayer (trainer/model/bert.py: transformers' layer, parameter for parameter), run on a packed token stream
with a pluggable attention kernel.

PENCIL's blocks are BERT layers (post-LN, GELU). The layer's weights are the single source of truth; this
module only decides how its self-attention core is computed:

  sdpa          pad the stream to (B, L), call the BertLayer itself (torch SDPA) with a key padding mask.
                The reference every other path is tested against (and it against transformers' own layer).
  bucketed      the attention core only, padded per *length bucket* (samples sorted by length, cut where
                padding would exceed 25 %), one torch SDPA call per bucket, with attention dropout.
                Padding the whole batch to its longest sample multiplied tokens by ~4 on citeseer; this
                bounds it at 1.25x. The CPU default (measured with `python -m bench.trainer --clock cpu` on
                real citeseer shards: hidden 128 x 2, (2,5) lengths: 41.8 ms/step vs 51.9 packed reference vs
                88.3 padded; (1,5): 1.34x padded; hidden 32: 0.97x padded) and the fp32 / fallback path on CUDA.
  varlen        torch.nn.attention.varlen.varlen_attn (FlashAttention varlen, CUDA, bf16/fp16) on the flat
                stream: no padding at all. It has NO attention-probability dropout: the explicit fast choice.
  flash_varlen  the same FlashAttention varlen kernel called through aten._flash_attention_forward, which
                (unlike varlen_attn) takes dropout_p: packed *and* the paper's attention dropout. The CUDA
                default when dropout > 0 and the flash-attn package is absent.
  flash_attn    flash_attn.flash_attn_varlen_func (the flash-attn package), packed, with dropout.
  reference     pure PyTorch on the flat stream, one softmax per sample (a loop over segments). Slow;
                exists so CPU tests can check packed == padded, attention dropout semantics included.

Flash kernels take only bf16/fp16: under fp32 (evaluation, which scores in fp32 so 500 hard negatives do
not tie in bf16's 3 digits) the flash backends compute their attention core with `bucketed` instead.

For the packed kernels we call the BertLayer's sub-modules ourselves (query/key/value, output.dense +
dropout + LayerNorm, intermediate, output), which is exactly BertLayer.forward minus the attention core.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from trainer.data.packing import PackedBatch
from trainer.data.padded import padded_positions
from trainer.model.bert import BertLayer

BACKENDS = ("auto", "sdpa", "bucketed", "varlen", "flash_varlen", "flash_attn", "reference")
PACKED = ("bucketed", "varlen", "flash_varlen", "flash_attn", "reference")  # never pad the whole batch
FLASH = ("varlen", "flash_varlen", "flash_attn")  # bf16/fp16 only, CUDA only
DROPOUT_FREE = ("varlen",)  # backends that cannot apply attention-probability dropout
BUCKET_SLACK = 1.25  # a bucket's padded tokens stay <= 1.25 x its real tokens
CPU_DEFAULT = "bucketed"  # measured fastest on CPU (bench.trainer --clock cpu; numbers in the docstring)


# ---------------------------------------------------------------------------- availability
@functools.cache
def torch_varlen_attn():
    """torch.nn.attention.varlen.varlen_attn, or None on torch builds without it."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@functools.cache
def flash_attn_varlen():
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:  # also covers a flash-attn built against another torch (ImportError subclasses)
        return None
    return flash_attn_varlen_func


def _aten_flash(q, k, v, cu, max_len: int, dropout_p: float, scale: float):
    # (output, logsumexp, rng_state, unused, debug_mask); positional arguments up to return_debug_mask and
    # the `scale` keyword have kept this schema since torch 2.1. Autograd comes from derivatives.yaml.
    return torch.ops.aten._flash_attention_forward(
        q, k, v, cu, cu, max_len, max_len, dropout_p, False, False, scale=scale
    )[0]


def aten_flash_error() -> str | None:
    """None if aten's FlashAttention varlen kernel runs forward+backward with dropout on the current GPU,
    else why not (one line). Probed once per device on a tiny input: the op is private, so trust it only
    after it has run. (The current device, not GPU 0: a DDP rank must not open a context on another GPU.)"""
    if not torch.cuda.is_available():
        return "CUDA is not available"
    return _probe_aten_flash(torch.cuda.current_device())


@functools.cache
def _probe_aten_flash(device_index: int) -> str | None:
    try:
        dev = torch.device("cuda", device_index)
        q = torch.randn(10, 2, 16, device=dev, dtype=torch.bfloat16, requires_grad=True)
        cu = torch.tensor([0, 3, 10], device=dev, dtype=torch.int32)
        _aten_flash(q, q, q, cu, 7, 0.5, 0.25).float().sum().backward()
        torch.cuda.synchronize(dev)
    except Exception as err:  # any failure means "not usable here"; the message says which
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
    return None


def resolve_backend(name: str, device_type: str, attn_dropout: float = 0.0) -> str:
    """The concrete backend for a requested one on a device type ("cuda" / "cpu" / ...)."""
    if name not in BACKENDS:
        raise ValueError(f"attention: unknown backend '{name}'; choose one of {', '.join(BACKENDS)}")
    cuda = device_type == "cuda"
    if name == "auto":
        if not cuda:
            return CPU_DEFAULT
        if attn_dropout > 0:  # the paper's model: a packed kernel that applies attention dropout
            if flash_attn_varlen() is not None:
                return "flash_attn"
            return "flash_varlen" if aten_flash_error() is None else "bucketed"
        if torch_varlen_attn() is not None:
            return "varlen"
        if flash_attn_varlen() is not None:
            return "flash_attn"
        return "flash_varlen" if aten_flash_error() is None else "bucketed"
    if name in FLASH and not cuda:
        raise ValueError(f"attention '{name}' needs a CUDA device (got {device_type}); use 'bucketed' or 'auto'")
    if name == "varlen" and torch_varlen_attn() is None:
        raise ValueError(
            "attention 'varlen': this torch has no torch.nn.attention.varlen; use 'flash_varlen' or 'auto'"
        )
    if name == "flash_attn" and flash_attn_varlen() is None:
        raise ValueError("attention 'flash_attn': the flash-attn package is not importable; use 'auto'")
    if name == "flash_varlen" and (err := aten_flash_error()) is not None:
        raise ValueError(f"attention 'flash_varlen': aten's FlashAttention kernel failed a probe ({err}); use 'auto'")
    return name


def describe_backend(requested: str, resolved: str, attn_dropout: float) -> str:
    """One line for the start-up log: which kernel runs, and whether the paper's attention dropout applies."""
    if attn_dropout <= 0:
        drop = "attention dropout 0"
    elif resolved in DROPOUT_FREE:
        drop = (
            f"attention dropout {attn_dropout} NOT applied (torch varlen_attn has none; hidden dropout "
            f"still applies); --attention auto applies it"
        )
    else:
        drop = f"attention dropout {attn_dropout} applied"
    why = ""
    if requested == "auto" and resolved == "bucketed" and attn_dropout > 0 and torch.cuda.is_available():
        why = f"; no packed dropout kernel here (flash-attn absent, aten flash: {aten_flash_error()})"
    fp32 = "; fp32 evaluation computes attention with bucketed SDPA" if resolved in FLASH else ""
    return f"attention {resolved} (requested {requested}): {drop}{why}{fp32}"


# ---------------------------------------------------------------------------- length buckets
@dataclass
class Bucket:
    """Samples of similar length, padded together: index (n, L) flat token ids (T = the zero pad row)."""

    index: torch.Tensor  # (n, L) int64
    key_mask: torch.Tensor | None  # (n, 1, 1, L) bool, True = attend; None when no row is padded
    real: torch.Tensor  # (n * L,) bool, the slots that hold real tokens


def bucket_plan(lens: np.ndarray, slack: float = BUCKET_SLACK) -> list[np.ndarray]:
    """Group sample indices into buckets of similar length with padded <= slack x real tokens each.
    Greedy over lengths in ascending order (stable, so equal inputs give equal plans)."""
    order = np.argsort(lens, kind="stable")
    groups, start, total = [], 0, 0
    for i, b in enumerate(order):
        n = int(lens[b])
        if i > start and (i - start + 1) * n > slack * (total + n):
            groups.append(order[start:i])
            start, total = i, 0
        total += n
    groups.append(order[start:])
    return groups


def build_buckets(cu: np.ndarray, device: torch.device) -> tuple[list[Bucket], torch.Tensor]:
    """Buckets of a batch with host offsets `cu` (B+1,), and `inverse` (T,): the flat order of tokens in
    the concatenation of every bucket's real rows, inverted (cat(...)[inverse] is the flat stream)."""
    lens = np.diff(cu)
    T = int(cu[-1])
    buckets, order = [], []
    for group in bucket_plan(lens):
        L = int(lens[group].max())
        j = np.arange(L)
        real = j[None, :] < lens[group][:, None]  # (n, L)
        index = np.where(real, cu[group][:, None] + j[None, :], T)
        order.append(index[real])
        mask = None if real.all() else torch.from_numpy(real[:, None, None, :]).to(device)
        buckets.append(Bucket(torch.from_numpy(index).to(device), mask, torch.from_numpy(real.reshape(-1)).to(device)))
    inverse = np.empty(T, dtype=np.int64)
    inverse[np.concatenate(order)] = np.arange(T)
    return buckets, torch.from_numpy(inverse).to(device)


# ---------------------------------------------------------------------------- per-forward context
@dataclass
class AttentionContext:
    """What a backend needs about the batch, computed once per forward and shared by all layers."""

    backend: str
    batch: PackedBatch
    pos: torch.Tensor | None = None  # sdpa: (T,) flat token -> b * L + j
    key_mask: torch.Tensor | None = None  # sdpa: (B, 1, 1, L) bool, True = attend
    bounds: list[int] | None = None  # reference: cu_seqlens on the host
    _buckets: tuple | None = None  # bucketed (also the fp32 path of the flash backends), built on first use

    @classmethod
    def build(cls, backend: str, batch: PackedBatch) -> "AttentionContext":
        ctx = cls(backend, batch)
        if backend == "sdpa":
            ctx.pos, mask = padded_positions(batch)
            ctx.key_mask = mask[:, None, None, :]
        elif backend == "reference":
            ctx.bounds = batch.cu_seqlens.tolist()
        elif backend == "bucketed":
            ctx.buckets()
        return ctx

    def buckets(self) -> tuple[list[Bucket], torch.Tensor]:
        if self._buckets is None:
            # One host read of the offsets per forward (free on CPU; on CUDA only the fp32 / fallback path).
            self._buckets = build_buckets(
                self.batch.cu_seqlens.cpu().numpy().astype(np.int64), self.batch.cu_seqlens.device
            )
        return self._buckets


# ---------------------------------------------------------------------------- kernels: (T, H, D) -> (T, H, D)
def _reference_kernel(q, k, v, ctx: AttentionContext, dropout_p: float, scale: float, training: bool):
    out = []
    lens = [e - s for s, e in zip(ctx.bounds[:-1], ctx.bounds[1:])]
    # split, not x[s:e]: a slice's backward writes a full-size zero tensor per sample, split's is one cat
    for qs, ks, vs in zip(*(x.transpose(0, 1).split(lens, dim=1) for x in (q, k, v))):  # (H, L_b, D) each
        p = torch.softmax((qs @ ks.transpose(1, 2)) * scale, dim=-1)  # (H, L_b, L_b)
        p = F.dropout(p, dropout_p, training=training)  # same place as HF's eager/SDPA attention dropout
        out.append(p @ vs)  # (H, L_b, D)
    return torch.cat(out, dim=1).transpose(0, 1)  # (T, H, D)


def bucketed_kernel(q, k, v, ctx: AttentionContext, dropout_p: float, scale: float, training: bool):
    buckets, inverse = ctx.buckets()
    T, H, D = q.shape
    pad = q.new_zeros(1, H, D)
    qp, kp, vp = (torch.cat([x, pad]) for x in (q, k, v))  # row T is the padding row
    outs = []
    for b in buckets:
        n, L = b.index.shape
        qb, kb, vb = (x[b.index].transpose(1, 2) for x in (qp, kp, vp))  # (n, H, L, D)
        o = F.scaled_dot_product_attention(
            qb, kb, vb, attn_mask=b.key_mask, scale=scale, dropout_p=dropout_p if training else 0.0
        )
        outs.append(o.transpose(1, 2).reshape(n * L, H, D)[b.real])  # real rows, in bucket order
    return torch.cat(outs)[inverse]


def _half(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype in (torch.float16, torch.bfloat16) else x.to(torch.bfloat16)


def _varlen_kernel(q, k, v, ctx: AttentionContext, dropout_p: float, scale: float, training: bool):
    b = ctx.batch
    # scale left at its default 1/sqrt(D) (= BERT's) so the call also matches torch 2.11's signature
    out = torch_varlen_attn()(_half(q), _half(k), _half(v), b.cu_seqlens, b.cu_seqlens, b.max_seqlen, b.max_seqlen)
    return out.to(q.dtype)


def _flash_varlen_kernel(q, k, v, ctx: AttentionContext, dropout_p: float, scale: float, training: bool):
    b = ctx.batch
    out = _aten_flash(_half(q), _half(k), _half(v), b.cu_seqlens, b.max_seqlen, dropout_p if training else 0.0, scale)
    return out.to(q.dtype)


def _flash_kernel(q, k, v, ctx: AttentionContext, dropout_p: float, scale: float, training: bool):
    b = ctx.batch
    out = flash_attn_varlen()(
        _half(q),
        _half(k),
        _half(v),
        b.cu_seqlens,
        b.cu_seqlens,
        b.max_seqlen,
        b.max_seqlen,
        dropout_p=dropout_p if training else 0.0,
        softmax_scale=scale,
        causal=False,
    )
    return out.to(q.dtype)


KERNELS = {
    "reference": _reference_kernel,
    "bucketed": bucketed_kernel,
    "varlen": _varlen_kernel,
    "flash_varlen": _flash_varlen_kernel,
    "flash_attn": _flash_kernel,
}


# ---------------------------------------------------------------------------- the layer
def bert_layer(layer: BertLayer, h: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
    """Z = BertLayer(H) on a packed stream: (T, d) -> (T, d), attention only within each sample."""
    if ctx.backend == "sdpa":
        return _bert_layer_padded(layer, h, ctx)
    sa = layer.attention.self
    T, H, D = h.shape[0], sa.num_attention_heads, sa.attention_head_size
    q, k, v = (lin(h).view(T, H, D) for lin in (sa.query, sa.key, sa.value))  # (T, H, D) each
    kernel = KERNELS[ctx.backend]
    if ctx.backend in FLASH and q.dtype == torch.float32:
        kernel = bucketed_kernel  # fp32 (eval outside autocast): flash would round q, k, v to bf16
    a = kernel(q, k, v, ctx, sa.dropout.p, D**-0.5, layer.training)  # (T, H, D)
    a = layer.attention.output(a.reshape(T, H * D), h)  # dense, dropout, LayerNorm(x + h)
    return layer.feed_forward_chunk(a)  # intermediate (GELU) then output (dense, dropout, LayerNorm)


def _bert_layer_padded(layer: BertLayer, h: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
    B, L = ctx.key_mask.shape[0], ctx.key_mask.shape[-1]
    hp = h.new_zeros(B * L, h.shape[1]).index_copy(0, ctx.pos, h).view(B, L, -1)  # (B, L, d), zeros at padding
    # A bool mask (True = attend), whatever the autocast dtype of q (an additive float mask would have to match it)
    # (T, d): padded rows are dropped, so they never matter
    return layer(hp, attention_mask=ctx.key_mask).reshape(B * L, -1)[ctx.pos]
