"""BERT's encoder layer, the block PENCIL stacks: post-LN, GELU, dropout after each projection.

Module for module and parameter for parameter the BertLayer of Hugging Face's transformers with SDPA
attention (the paper's code uses that layer): the same state_dict keys, the same construction order (so one
seed gives the same initial weights) and the same operations in the same order (so dropout draws the same
masks). It lives here because importing transformers' BERT costs every process that builds a model 3 to 4 s
on a CPU machine (bench/cpu_epoch.py), which every trainer, scorer and service paid at start.
tests/test_bert_layer.py holds it to transformers' own layer: weights, outputs and gradients.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LAYER_NORM_EPS = 1e-12  # BERT's


class SelfAttention(nn.Module):
    """Q, K, V projections and scaled dot-product attention over (B, L, d), optionally masked (B, 1, 1, L)
    bool, True = attend). The packed paths (trainer/model/attention.py) use the projections with their own kernels."""

    def __init__(self, hidden: int, heads: int, dropout: float):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of the number of heads {heads}")
        self.num_attention_heads = heads
        self.attention_head_size = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)  # on the attention probabilities

    def forward(self, h: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, L, _ = h.shape
        H, D = self.num_attention_heads, self.attention_head_size
        q, k, v = (lin(h).view(B, L, H, D).transpose(1, 2) for lin in (self.query, self.key, self.value))
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attention_mask, dropout_p=self.dropout.p if self.training else 0.0, scale=D**-0.5
        )
        return out.transpose(1, 2).reshape(B, L, H * D)


class AddNorm(nn.Module):
    """LayerNorm(dropout(dense(x)) + residual): BERT's output of the attention and of the feed-forward."""

    def __init__(self, d_in: int, hidden: int, dropout: float):
        super().__init__()
        self.dense = nn.Linear(d_in, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=LAYER_NORM_EPS)  # noqa: N815 - the name in BERT's checkpoints
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, dropout: float, attention_dropout: float | None = None):
        super().__init__()
        self.self = SelfAttention(hidden, heads, dropout if attention_dropout is None else attention_dropout)
        self.output = AddNorm(hidden, hidden, dropout)

    def forward(self, h: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.output(self.self(h, attention_mask), h)


class Intermediate(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.dense = nn.Linear(hidden, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))  # exact (erf) GELU, BERT's "gelu"


class BertLayer(nn.Module):
    """Z = FFN(Attn(H)) with BERT's residuals and LayerNorms; (B, L, d) -> (B, L, d). `attention_dropout`: on the
    attention probabilities (None: `dropout`, BERT's one value for both)."""

    def __init__(self, hidden: int, heads: int, ffn: int, dropout: float, attention_dropout: float | None = None):
        super().__init__()
        self.attention = Attention(hidden, heads, dropout, attention_dropout)
        self.intermediate = Intermediate(hidden, ffn)
        self.output = AddNorm(ffn, hidden, dropout)

    def forward(self, h: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.feed_forward_chunk(self.attention(h, attention_mask))

    def feed_forward_chunk(self, a: torch.Tensor) -> torch.Tensor:
        """The feed-forward half on the attention's output a, any leading shape: (..., d) -> (..., d)."""
        return self.output(self.intermediate(a), a)
