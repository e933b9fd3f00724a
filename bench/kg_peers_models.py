"""The two models of bench.kg_peers, each as (model, step, scorer): step() trains one epoch, scorer scores triples
(M, 3) -> (M,) and every entity on a side of a block of queries -> (B, N), as numpy float64."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


class RGCNEncoder(torch.nn.Module):
    """torch_geometric examples/rgcn_link_pred.py: entity embeddings, two block-decomposed RGCNConv layers."""

    def __init__(self, num_nodes: int, hidden: int, num_relations: int, blocks: int):
        super().__init__()
        from torch_geometric.nn import RGCNConv

        self.node_emb = torch.nn.Parameter(torch.empty(num_nodes, hidden))
        self.conv1 = RGCNConv(hidden, hidden, num_relations, num_blocks=blocks)
        self.conv2 = RGCNConv(hidden, hidden, num_relations, num_blocks=blocks)
        torch.nn.init.xavier_uniform_(self.node_emb)

    def forward(self, edge_index, edge_type):
        x = self.conv1(self.node_emb, edge_index, edge_type).relu_()
        x = F.dropout(x, p=0.2, training=self.training)
        return self.conv2(x, edge_index, edge_type)


class DistMult(torch.nn.Module):
    def __init__(self, num_relations: int, hidden: int):
        super().__init__()
        self.rel_emb = torch.nn.Parameter(torch.empty(num_relations, hidden))
        torch.nn.init.xavier_uniform_(self.rel_emb)

    def forward(self, z, h, r, t):
        return (z[h] * self.rel_emb[r] * z[t]).sum(dim=1)


class RGCNLinkPred(torch.nn.Module):
    def __init__(self, num_nodes: int, num_relations: int, hidden: int, blocks: int):
        super().__init__()
        # the encoder sees every relation and its inverse; the decoder scores the R forward ones
        self.encoder = RGCNEncoder(num_nodes, hidden, 2 * num_relations, blocks)
        self.decoder = DistMult(num_relations, hidden)


def corrupt(h: torch.Tensor, t: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The example's negatives: each triple's head or tail (a coin each) replaced by a uniform entity."""
    coin = torch.rand(h.shape[0]) < 0.5
    h2, t2 = h.clone(), t.clone()
    h2[coin] = torch.randint(n, (int(coin.sum()),))
    t2[~coin] = torch.randint(n, (int((~coin).sum()),))
    return h2, t2


class RGCNScorer:
    def __init__(self, model: RGCNLinkPred, edge_index, edge_type):
        self.model, self.edge_index, self.edge_type, self.z = model, edge_index, edge_type, None

    def reset(self):
        self.z = None

    @torch.no_grad()
    def _z(self):
        if self.z is None:
            self.model.eval()
            self.z = self.model.encoder(self.edge_index, self.edge_type)
        return self.z

    @torch.no_grad()
    def score_triples(self, triples: np.ndarray) -> np.ndarray:
        t = torch.as_tensor(triples)
        return self.model.decoder(self._z(), t[:, 0], t[:, 1], t[:, 2]).double().numpy()

    @torch.no_grad()
    def score_all(self, queries: np.ndarray, side: int) -> np.ndarray:
        z, q = self._z(), torch.as_tensor(queries)
        anchor = z[q[:, 2 - side]] * self.model.decoder.rel_emb[q[:, 1]]  # DistMult is symmetric in h and t
        return (anchor @ z.T).double().numpy()


def rgcn_peer(train: np.ndarray, n: int, num_rel: int, hidden: int = 100, blocks: int = 4):
    """The example's model at hidden 100, 4 blocks (the example: 500, 5): at 500 a full-batch step took 70 s on
    the shared 2 cores, too slow to train; 100 takes about 20 s under the same load."""
    model = RGCNLinkPred(n, num_rel, hidden, blocks)
    tr = torch.as_tensor(train)
    h, r, t = tr[:, 0], tr[:, 1], tr[:, 2]
    edge_index = torch.cat([torch.stack([h, t]), torch.stack([t, h])], dim=1)
    edge_type = torch.cat([r, r + num_rel])
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    scorer = RGCNScorer(model, edge_index, edge_type)

    def step():
        model.train()
        opt.zero_grad()
        z = model.encoder(edge_index, edge_type)
        pos = model.decoder(z, h, r, t)
        h2, t2 = corrupt(h, t, n)
        neg = model.decoder(z, h2, r, t2)
        out = torch.cat([pos, neg])
        gt = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
        reg = z.pow(2).mean() + model.decoder.rel_emb.pow(2).mean()
        loss = F.binary_cross_entropy_with_logits(out, gt) + 1e-2 * reg
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        scorer.reset()

    return model, step, scorer


class PyKEENScorer:
    def __init__(self, model):
        self.model = model

    def reset(self):
        pass

    @torch.no_grad()
    def score_triples(self, triples: np.ndarray) -> np.ndarray:
        self.model.eval()
        return self.model.score_hrt(torch.as_tensor(triples)).view(-1).double().numpy()

    @torch.no_grad()
    def score_all(self, queries: np.ndarray, side: int) -> np.ndarray:
        self.model.eval()
        q = torch.as_tensor(queries)
        if side == 2:
            return self.model.score_t(q[:, :2]).double().numpy()
        return self.model.score_h(q[:, 1:]).double().numpy()


def complex_peer(train: np.ndarray, n: int, num_rel: int, loop: str = "slcwa", dim: int = 100, seed: int = 0):
    """pykeen ComplEx; sLCWA: softplus loss, 32 corruptions per triple (heads and tails); LCWA: cross-entropy over
    every tail of each (head, relation). Adam 1e-2, batch 1024 (at 4096 it got 84 steps in 16 min on the shared
    2 cores and stayed at chance: embeddings need steps); PyKEEN's default L2 regulariser."""
    from pykeen.models import ComplEx
    from pykeen.training import LCWATrainingLoop, SLCWATrainingLoop
    from pykeen.triples import CoreTriplesFactory

    tf = CoreTriplesFactory.create(mapped_triples=torch.as_tensor(train), num_entities=n, num_relations=num_rel)
    loss = "softplus" if loop == "slcwa" else "crossentropy"
    model = ComplEx(triples_factory=tf, embedding_dim=dim, loss=loss, random_seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if loop == "slcwa":
        trainer = SLCWATrainingLoop(
            model=model, triples_factory=tf, optimizer=opt, negative_sampler_kwargs={"num_negs_per_pos": 32}
        )
    else:
        trainer = LCWATrainingLoop(model=model, triples_factory=tf, optimizer=opt)
    state = {"epoch": 0}

    def step():
        state["epoch"] += 1
        trainer.train(
            tf, num_epochs=state["epoch"], batch_size=1024, continue_training=state["epoch"] > 1, use_tqdm=False
        )

    return model, step, PyKEENScorer(model)
