"""The (B, L) padded view of a packed batch (trainer/data/packing.py), for the attention paths that need rows:
where each flat token sits in its sample's row, and the way back to flat order."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.data.packing import PackedBatch


@dataclass
class PaddedBatch:
    """The (B, L) view of a PackedBatch, L = max_seqlen; sample b's token j sits at (b, j), padding after.

    Row layout is [context..., u-task, v-task, pad...] (the paper pads context to N_B before the task
    tokens; the two are equivalent because nothing in the model depends on position).
    """

    local_id: torch.Tensor  # (B, L) int64, 0 at padding
    role: torch.Tensor  # (B, L) int64, 0 at padding
    node: torch.Tensor  # (B, L) int64, 0 at padding
    mask: torch.Tensor  # (B, L) bool, True = real token (key padding mask)
    index: torch.Tensor  # (B, L) int64 flat position of each padded slot, -1 at padding
    pos: torch.Tensor  # (T,) int64 position b * L + j of each flat token in the flattened (B * L) view
    task_index: torch.Tensor  # (B, 2) int64 column j of the u-task / v-task tokens in each row
    adj_src: torch.Tensor  # (E',) int64 message sources as b * L + j
    adj_dst: torch.Tensor  # (E',) int64 message receivers as b * L + j
    label: torch.Tensor  # (B,)
    cid: torch.Tensor  # (B,)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.mask.shape)


def token_sample(batch: PackedBatch) -> torch.Tensor:
    """(T,) int64 index of the sample each token belongs to (on the batch's device)."""
    lens = (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).long()
    # output_size avoids a device->host sync on CUDA
    return torch.repeat_interleave(
        torch.arange(batch.num_samples, device=lens.device), lens, output_size=batch.num_tokens
    )


def padded_positions(batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(pos (T,), mask (B, L)): where each flat token goes in the flattened (B * L) view, and which slots
    are real. The cheap part of to_padded(), used by the padded attention path every layer."""
    B, L, T = batch.num_samples, batch.max_seqlen, batch.num_tokens
    seg = token_sample(batch)
    j = torch.arange(T, device=seg.device) - batch.cu_seqlens.long()[seg]  # (T,) column in the row
    pos = seg * L + j
    mask = torch.zeros(B * L, dtype=torch.bool, device=seg.device)
    mask[pos] = True
    return pos, mask.view(B, L)


def to_padded(batch: PackedBatch) -> PaddedBatch:
    B, L = batch.num_samples, batch.max_seqlen
    pos, mask = padded_positions(batch)
    dev = pos.device

    def spread(x: torch.Tensor, fill: int) -> torch.Tensor:  # (T,) -> (B, L)
        out = torch.full((B * L,), fill, dtype=x.dtype, device=dev)
        out[pos] = x
        return out.view(B, L)

    flat = torch.arange(batch.num_tokens, device=dev)
    return PaddedBatch(
        local_id=spread(batch.local_id, 0),
        role=spread(batch.role, 0),
        node=spread(batch.node, 0),
        mask=mask,
        index=spread(flat, -1),
        pos=pos,
        task_index=batch.task_index - batch.cu_seqlens[:-1].long()[:, None],
        adj_src=pos[batch.adj_src],
        adj_dst=pos[batch.adj_dst],
        label=batch.label,
        cid=batch.cid,
    )


def from_padded(x: torch.Tensor, padded: PaddedBatch) -> torch.Tensor:
    """(B, L, ...) -> (T, ...): the real tokens of a padded tensor back in flat order."""
    return x.reshape(-1, *x.shape[2:])[padded.pos]
