"""One HF BertLayer, run on a packed token stream with a pluggable attention kernel.

PENCIL's blocks are stock `transformers` BertLayers (post-LN, GELU). The layer's weights are the single
source of truth; this module only decides how its self-attention core is computed:

  sdpa        pad the stream to (B, L), call the BertLayer itself (HF's SDPA attention) with a key
              padding mask. The CPU default and the reference the packed paths are tested against.
  varlen      torch.nn.attention.varlen.varlen_attn (FlashAttention varlen, CUDA, bf16/fp16) on the
              flat stream: no padding, no wasted FLOPs. It has no attention-probability dropout.
  flash_attn  flash_attn.flash_attn_varlen_func (the flash-attn package), same idea, with dropout.
  reference   pure PyTorch on the flat stream, one softmax per sample (a loop over segments). Slow;
              exists so CPU tests can check packed == padded, including attention dropout semantics.

For the packed kernels we call the BertLayer's sub-modules ourselves (query/key/value, output.dense +
dropout + LayerNorm, intermediate, output), which is exactly BertLayer.forward minus the attention core.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertLayer

from trainer.packing import PackedBatch, padded_positions

BACKENDS = ("auto", "sdpa", "varlen", "flash_attn", "reference")
PACKED = ("varlen", "flash_attn", "reference")  # backends that never pad


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


def resolve_backend(name: str, device_type: str, attn_dropout: float = 0.0) -> str:
    """The concrete backend for a requested one on a device type ("cuda" / "cpu" / ...)."""
    if name not in BACKENDS:
        raise ValueError(f"attention: unknown backend '{name}'; choose one of {', '.join(BACKENDS)}")
    cuda = device_type == "cuda"
    if name == "auto":
        if not cuda:
            return "sdpa"
        # Prefer a kernel that can apply the reference's attention dropout when it is on.
        if attn_dropout > 0 and flash_attn_varlen() is not None:
            return "flash_attn"
        if torch_varlen_attn() is not None:
            return "varlen"
        return "flash_attn" if flash_attn_varlen() is not None else "sdpa"
    if name in ("varlen", "flash_attn"):
        if not cuda:
            raise ValueError(f"attention '{name}' needs a CUDA device (got {device_type}); use 'sdpa' or 'auto'")
        if name == "varlen" and torch_varlen_attn() is None:
            if flash_attn_varlen() is None:
                raise ValueError("attention 'varlen': this torch has no torch.nn.attention.varlen and "
                                 "flash-attn is not installed; use 'sdpa'")
            return "flash_attn"
        if name == "flash_attn" and flash_attn_varlen() is None:
            raise ValueError("attention 'flash_attn': the flash-attn package is not importable")
    return name


def bert_config(hidden: int, heads: int, ffn: int, dropout: float) -> BertConfig:
    """The reference's BertLayer configuration (DESIGN.md §4), with HF's SDPA attention for the padded path."""
    cfg = BertConfig(hidden_size=hidden, num_attention_heads=heads, intermediate_size=ffn, hidden_act="gelu",
                     hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, layer_norm_eps=1e-12,
                     num_hidden_layers=1, vocab_size=1, max_position_embeddings=1, type_vocab_size=1,
                     attn_implementation="sdpa")
    cfg._attn_implementation = "sdpa"  # belt and braces: the setter exists in 4.4x and 5.x
    # The padded path passes a *boolean* key mask, which only SDPA reads correctly (eager would add it).
    if cfg._attn_implementation != "sdpa":
        raise RuntimeError(f"transformers {__import__('transformers').__version__}: could not select SDPA "
                           f"attention for BertLayer (got {cfg._attn_implementation!r})")
    return cfg


# ---------------------------------------------------------------------------- per-forward context
@dataclass
class AttentionContext:
    """What a backend needs about the batch, computed once per forward and shared by all layers."""

    backend: str
    batch: PackedBatch
    pos: torch.Tensor | None = None  # sdpa: (T,) flat token -> b * L + j
    key_mask: torch.Tensor | None = None  # sdpa: (B, 1, 1, L) bool, True = attend
    bounds: list[int] | None = None  # reference: cu_seqlens on the host

    @classmethod
    def build(cls, backend: str, batch: PackedBatch) -> "AttentionContext":
        ctx = cls(backend, batch)
        if backend == "sdpa":
            ctx.pos, mask = padded_positions(batch)
            ctx.key_mask = mask[:, None, None, :]
        elif backend == "reference":
            ctx.bounds = batch.cu_seqlens.tolist()
        return ctx


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


def _half(x: torch.Tensor) -> torch.Tensor:
    # Flash kernels take only fp16/bf16: outside autocast (fp32 eval) compute in bf16 and cast back.
    return x if x.dtype in (torch.float16, torch.bfloat16) else x.to(torch.bfloat16)


def _varlen_kernel(q, k, v, ctx: AttentionContext, dropout_p: float, scale: float, training: bool):
    b = ctx.batch
    # scale left at its default 1/sqrt(D) (= BERT's) so the call also matches torch 2.11's signature
    out = torch_varlen_attn()(_half(q), _half(k), _half(v), b.cu_seqlens, b.cu_seqlens, b.max_seqlen, b.max_seqlen)
    return out.to(q.dtype)


def _flash_kernel(q, k, v, ctx: AttentionContext, dropout_p: float, scale: float, training: bool):
    b = ctx.batch
    out = flash_attn_varlen()(_half(q), _half(k), _half(v), b.cu_seqlens, b.cu_seqlens, b.max_seqlen,
                              b.max_seqlen, dropout_p=dropout_p if training else 0.0, softmax_scale=scale,
                              causal=False)
    return out.to(q.dtype)


KERNELS = {"reference": _reference_kernel, "varlen": _varlen_kernel, "flash_attn": _flash_kernel}


@functools.cache
def _warn_no_attn_dropout(p: float):
    warnings.warn(f"attention 'varlen' (torch varlen_attn) cannot apply attention-probability dropout "
                  f"({p}); hidden dropout still applies. Install flash-attn for the reference's behaviour.",
                  stacklevel=3)


# ---------------------------------------------------------------------------- the layer
def bert_layer(layer: BertLayer, h: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
    """Z = BertLayer(H) on a packed stream: (T, d) -> (T, d), attention only within each sample."""
    if ctx.backend == "sdpa":
        return _bert_layer_padded(layer, h, ctx)
    sa = layer.attention.self
    T, H, D = h.shape[0], sa.num_attention_heads, sa.attention_head_size
    q, k, v = (lin(h).view(T, H, D) for lin in (sa.query, sa.key, sa.value))  # (T, H, D) each
    p = sa.dropout.p
    if ctx.backend == "varlen" and p > 0 and layer.training:
        _warn_no_attn_dropout(p)
    a = KERNELS[ctx.backend](q, k, v, ctx, p, D ** -0.5, layer.training)  # (T, H, D)
    a = layer.attention.output(a.reshape(T, H * D), h)  # dense, dropout, LayerNorm(x + h)
    return layer.feed_forward_chunk(a)  # intermediate (GELU) then output (dense, dropout, LayerNorm)


def _bert_layer_padded(layer: BertLayer, h: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
    B, L = ctx.key_mask.shape[0], ctx.key_mask.shape[-1]
    hp = h.new_zeros(B * L, h.shape[1]).index_copy(0, ctx.pos, h).view(B, L, -1)  # (B, L, d), zeros at padding
    # A bool mask (True = attend) goes straight to torch SDPA in both transformers 4.4x and 5.x, whatever
    # the autocast dtype of q (an additive float mask would have to match it).
    out = layer(hp, attention_mask=ctx.key_mask)
    if isinstance(out, tuple):  # transformers 4.x returns (hidden_states, ...)
        out = out[0]
    return out.reshape(B * L, -1)[ctx.pos]  # (T, d): padded rows are dropped, so they never matter
