"""The time input (ModelConfig.time_features): every token gets Linear(log1p of its node's activity just before the
link is asked), added to H0 like the degree input (trainer/data/clock.py says what the activity is and when a link
is asked). Linear, not bucketed: the order of two busy items survives, where a bucket would tie them.

The clocks are data, not weights: model_for_shards attaches the set's (like the degree counts), so a checkpoint
holds only the Linear and a scorer rebuilds the same clocks from the same set.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from trainer.data.clock import ARRIVAL, WIDTH, ClockTable, EdgeClock
from trainer.data.packing import PackedBatch


class TimeInput(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(WIDTH, hidden)
        self.clocks: dict[str, ClockTable] = {}

    def attach(self, clocks: dict[str, EdgeClock]) -> "TimeInput":
        device = self.linear.weight.device
        self.clocks = {which: ClockTable(c, device) for which, c in clocks.items()}
        return self

    def _apply(self, fn, *args, **kwargs):  # model.to(device) takes the clocks along, still float64
        out = super()._apply(fn, *args, **kwargs)
        for table in self.clocks.values():
            table.to(self.linear.weight.device)
        return out

    def activity(self, batch: PackedBatch) -> torch.Tensor:
        """(T, WIDTH) float64: each token's activity when its link is asked (batch.clock: "arrival" in training,
        else the graph it was sampled on; None, a scoring batch: the newest graph the set ships), 0 at heads."""
        if not self.clocks:
            raise ValueError("the model reads node activity (time_features) but no clocks were attached")
        name = batch.clock or ("test" if "test" in self.clocks else "train")
        table = self.clocks["train" if name == ARRIVAL else name]
        node = batch.node.to(table.keys.device)
        seqlens = (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).long().to(node.device)
        if name == ARRIVAL:
            head = node[batch.task_index[:, 0].to(node.device)].clamp(max=table.num_nodes - 1)
            now = table.arrival[head].clamp(max=table.end)
        else:
            now = torch.full((batch.num_samples,), table.end, dtype=torch.float64, device=node.device)
        now = torch.repeat_interleave(now, seqlens, output_size=batch.num_tokens)
        return table.activity(node, now) * (batch.local_id.to(node.device) != 0)[:, None]

    def forward(self, batch: PackedBatch) -> torch.Tensor:
        x = self.activity(batch).to(self.linear.weight.device, self.linear.weight.dtype)
        return self.linear(x)
