"""The two models of bench.kg_peers, each as (model, step, scorer): step() trains one epoch, scorer scores triples
(M, 3) -> (M,) and every entity on a side of a block of queries -> (B, N), as numpy float64."""

from __future__ import annotations

import functools

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
    """A PyKEEN model's scores. With `inverse` (R, the forward relations), the model was trained on reciprocal
    triples and a triple scores s(h, r, t) + s(t, r + R, h): one function for head and tail candidates alike."""

    def __init__(self, model, inverse: int | None = None):
        self.model, self.inverse = model, inverse

    def reset(self):
        pass

    @torch.no_grad()
    def score_triples(self, triples: np.ndarray) -> np.ndarray:
        self.model.eval()
        t = torch.as_tensor(triples)
        s = self.model.score_hrt(t).view(-1)
        if self.inverse:
            s = s + self.model.score_hrt(torch.stack([t[:, 2], t[:, 1] + self.inverse, t[:, 0]], 1)).view(-1)
        return s.double().numpy()

    @torch.no_grad()
    def score_all(self, queries: np.ndarray, side: int) -> np.ndarray:
        self.model.eval()
        q = torch.as_tensor(queries)
        if side == 2:
            s = self.model.score_t(q[:, :2])
            if self.inverse:  # (e, r + R, h) for every e
                s = s + self.model.score_h(torch.stack([q[:, 1] + self.inverse, q[:, 0]], 1))
        else:
            s = self.model.score_h(q[:, 1:])
            if self.inverse:  # (t, r + R, e) for every e
                s = s + self.model.score_t(torch.stack([q[:, 2], q[:, 1] + self.inverse], 1))
        return s.double().numpy()


def reciprocal(train: np.ndarray, num_rel: int) -> np.ndarray:
    """train plus each triple reversed under its inverse relation r + R, so a 1-N model predicts heads as the
    tails of the inverse (Dettmers et al. 2018; Lacroix et al. 2018)."""
    return np.concatenate([train, np.stack([train[:, 2], train[:, 1] + num_rel, train[:, 0]], axis=1)])


def lcwa_chunks(triples: np.ndarray, chunks: int, seed: int) -> list[np.ndarray]:
    """The triples cut into `chunks` parts by their (head, relation): each part holds every tail of its rows, so
    1-N training on a part is a slice of a full epoch (a validation check every fraction of an epoch)."""
    _, group = np.unique(triples[:, :2], axis=0, return_inverse=True)
    part = np.random.default_rng(seed).permutation(group.max() + 1)[group.reshape(-1)] % chunks
    return [triples[part == c] for c in range(chunks)]


def complex_peer(
    train: np.ndarray,
    n: int,
    num_rel: int,
    loop: str = "lcwa",
    dim: int = 100,
    seed: int = 0,
    lr: float | None = None,
    chunks: int = 1,
):
    """pykeen.models.ComplEx trained by PyKEEN's own loop.

    lcwa, the literature's WN18RR setting (Dettmers et al. 2018; Lacroix et al. 2018; Ruffinelli et al. 2020):
    reciprocal relations, 1-N scoring with softmax cross-entropy over every entity, embeddings initialised at
    scale 1e-3 (Lacroix), no regulariser, Adam (lr 1e-2 by default), batches of 256 (head, relation) rows.
    slcwa, the first run's setting, kept to reproduce it: PyKEEN's defaults (unit normal init, L2 0.01, softplus),
    32 corruptions per triple, Adam 1e-2, batch 1024."""
    from pykeen.models import ComplEx
    from pykeen.training import LCWATrainingLoop, SLCWATrainingLoop
    from pykeen.triples import CoreTriplesFactory

    def factory(triples, relations):
        return CoreTriplesFactory.create(torch.as_tensor(triples), num_entities=n, num_relations=relations)

    if loop == "slcwa":
        tf = factory(train, num_rel)
        model = ComplEx(triples_factory=tf, embedding_dim=dim, loss="softplus", random_seed=seed)
        opt = torch.optim.Adam(model.parameters(), lr=lr or 1e-2)
        trainer = SLCWATrainingLoop(
            model=model, triples_factory=tf, optimizer=opt, negative_sampler_kwargs={"num_negs_per_pos": 32}
        )
        parts, batch, scorer = [tf], 1024, PyKEENScorer(model)
    else:
        both = reciprocal(train, num_rel)
        small = functools.partial(torch.nn.init.normal_, std=1e-3)
        tf = factory(both, 2 * num_rel)
        model = ComplEx(
            triples_factory=tf,
            embedding_dim=dim,
            loss="crossentropy",
            regularizer=None,
            entity_initializer=small,
            relation_initializer=small,
            random_seed=seed,
        )
        opt = torch.optim.Adam(model.parameters(), lr=lr or 1e-2)
        # no memory probing: on CPU it trains throwaway batches before every first call
        trainer = LCWATrainingLoop(model=model, triples_factory=tf, optimizer=opt, automatic_memory_optimization=False)
        parts = [factory(p, 2 * num_rel) for p in lcwa_chunks(both, chunks, seed)]
        batch, scorer = 256, PyKEENScorer(model, inverse=num_rel)
    state = {"calls": 0}

    def step():
        # one PyKEEN epoch over the next part: continue_training keeps the weights and the optimizer's state
        tf = parts[state["calls"] % len(parts)]
        state["calls"] += 1
        trainer.train(
            tf, num_epochs=state["calls"], batch_size=batch, continue_training=state["calls"] > 1, use_tqdm=False
        )

    return model, step, scorer
