"""The time input (ModelConfig.time_features): every token gets Linear(log1p of its node's activity just before the
link is asked), added to H0 like the degree input (trainer/data/clock.py says what the activity is and when a link
is asked). Linear, not bucketed: the order of two busy items survives, where a bucket would tie them.
With ModelConfig.peer_features, a second Linear of the token's lift among the nodes that share the head's attributes
(trainer/data/peers.py), asked at the same time.

The clocks are data, not weights: model_for_shards attaches the set's (like the degree counts), so a checkpoint
holds only the Linears and a scorer rebuilds the same clocks from the same set.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from trainer.data.clock import ARRIVAL, WIDTH, ClockTable, EdgeClock
from trainer.data.packing import PackedBatch
from trainer.data.peers import PeerTable


class TimeInput(nn.Module):
    def __init__(self, hidden: int, peers: bool = False):
        super().__init__()
        self.linear = nn.Linear(WIDTH, hidden)
        self.clocks: dict[str, ClockTable] = {}
        # created only then, so a model without it has the parameters and random stream it had
        self.peer_linear = nn.Linear(WIDTH, hidden) if peers else None
        self.peers: dict[str, PeerTable] = {}

    def attach(self, clocks: dict[str, EdgeClock], peers: dict[str, PeerTable] | None = None) -> "TimeInput":
        device = self.linear.weight.device
        self.clocks = {which: ClockTable(c, device) for which, c in clocks.items()}
        self.peers = {which: table.to(device) for which, table in (peers or {}).items()}
        return self

    def attach_set(self, manifest, table) -> "TimeInput":
        """The clocks of a shard set's graphs and, with the peer half, their peer tables from its feature table."""
        from trainer.data.clock import edge_clocks, set_times
        from trainer.data.peers import peer_tables

        times = set_times(manifest)  # read and checked once for both
        peers = peer_tables(manifest, table, times) if self.peer_linear is not None else None
        return self.attach(edge_clocks(manifest, times), peers)

    def _apply(self, fn, *args, **kwargs):  # model.to(device) takes the clocks along, still float64
        out = super()._apply(fn, *args, **kwargs)
        for table in [*self.clocks.values(), *self.peers.values()]:
            table.to(self.linear.weight.device)
        return out

    def asked(self, batch: PackedBatch) -> tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(the graph whose clock answers, and per token: its node, its link's head, the time its link is asked):
        batch.clock "arrival" in training (the head's first edge on the training graph), else the graph the batch
        was sampled on (its end); None, a scoring batch: the newest graph the set ships."""
        if not self.clocks:
            raise ValueError("the model reads node activity (time_features) but no clocks were attached")
        name = batch.clock or ("test" if "test" in self.clocks else "train")
        which = "train" if name == ARRIVAL else name
        table = self.clocks[which]
        node = batch.node.to(table.keys.device)
        seqlens = (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).long().to(node.device)
        head = node[batch.task_index[:, 0].to(node.device)]
        if name == ARRIVAL:
            now = table.arrival[head.clamp(max=table.num_nodes - 1)].clamp(max=table.end)
        else:
            now = torch.full((batch.num_samples,), table.end, dtype=torch.float64, device=node.device)
        per_token = lambda x: torch.repeat_interleave(x, seqlens, output_size=batch.num_tokens)  # noqa: E731
        return which, node, per_token(head), per_token(now)

    def activity(self, batch: PackedBatch) -> torch.Tensor:
        """(T, WIDTH) float64: each token's activity when its link is asked (`asked`), 0 at heads."""
        return self._read(batch, peers=False)[0]

    def peer_lift(self, batch: PackedBatch) -> torch.Tensor:
        """(T, WIDTH) float64: each token's lift among its head's peers when its link is asked, 0 at heads."""
        return self._read(batch, peers=True)[1]

    def _read(self, batch: PackedBatch, peers: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(activity, peer lift or None) of every token, the batch asked once for both."""
        which, node, head, now = self.asked(batch)
        not_head = (batch.local_id.to(node.device) != 0)[:, None]
        if not peers:
            return self.clocks[which].activity(node, now) * not_head, None
        if not self.peers:
            raise ValueError("the model reads peer activity (peer_features) but no peer tables were attached")
        lift = self.peers[which].lift(head, node, now) * not_head
        return self.clocks[which].activity(node, now) * not_head, lift

    def forward(self, batch: PackedBatch) -> torch.Tensor:
        w = self.linear.weight
        activity, lift = self._read(batch, peers=self.peer_linear is not None)
        out = self.linear(activity.to(w.device, w.dtype))
        if lift is not None:
            out = out + self.peer_linear(lift.to(w.device, w.dtype))
        return out
