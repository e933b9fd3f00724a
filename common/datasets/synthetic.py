"""Latent-space graphs (Hoff et al. 2002) as in the paper's Appendix D.4 "Link Prediction on Latent
Space Graphs".

Generative process (K clusters, d_latent = K):
  y_i ~ uniform{0..K-1};  c_k = s * e_k (centres on the coordinate axes);  z_i ~ N(c_{y_i}, noise^2 I)
  A_ij ~ Bernoulli(sigmoid(alpha - beta * ||z_i - z_j||^2)) independently for i < j
  x_i = sqrt(mu) * z_i W + eta_i,  W_ab ~ N(0, 1/p),  eta_i ~ N(0, I_p / p)
alpha is set so the EXPECTED average degree 2/N * sum_{i<j} p_ij hits the target: one blocked pass
bins all N(N-1)/2 squared distances into a fine histogram, then bisection runs on the histogram
(cheap), and a second blocked pass draws the edges. Both passes are vectorised over row blocks of
the upper triangle, so 10k nodes take a few seconds and memory stays at one block.

Negatives ("far apart in latent space", the paper's rule made concrete): uniform non-edges whose
squared latent distance exceeds the `neg_quantile` (default 0.9) quantile of the positive edges'
squared distances, i.e. pairs farther apart than 90% of real edges; as many as each eval split's
positives, disjoint between valid and test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from common.datasets.base import DatasetError, LinkDataset, Split, training_graph
from common.datasets.negatives import sample_non_edges
from common.graph import Graph

_BLOCK_ELEMS = 4_000_000  # pairs per block: ~16 MB of float32, bounded memory for any N
_BINS = 16_384  # histogram bins over [0, max d^2]; logit error per bin ~ beta * max_d2 / _BINS


def latent_positions(rng: np.random.Generator, num_nodes: int, clusters: int, s: float, noise: float):
    """(labels (N,), z (N, K)) with cluster centres s * e_k."""
    labels = rng.integers(0, clusters, size=num_nodes)
    z = s * np.eye(clusters)[labels] + noise * rng.standard_normal((num_nodes, clusters))
    return labels, z


def _row_blocks(n: int):
    """Row ranges [a, b) whose upper-triangle rectangles (b - a) x (n - a) stay near _BLOCK_ELEMS."""
    a = 0
    while a < n - 1:
        b = min(n, a + max(1, _BLOCK_ELEMS // (n - a)))
        yield a, b
        a = b


def _block_d2(z: np.ndarray, sq: np.ndarray, a: int, b: int) -> np.ndarray:
    """float32 squared distances of rows [a, b) to columns [a, n); only col > row is used later."""
    d2 = z[a:b] @ z[a:].T
    d2 *= -2.0
    d2 += sq[a:b, None]
    d2 += sq[None, a:]
    return np.maximum(d2, 0.0, out=d2)  # rounding can make tiny distances negative


def _upper(a: int, b: int) -> np.ndarray:
    """Mask of the leading (b - a) x (b - a) square of a block: True where col > row. Columns past
    the square all lie above the diagonal, so the rest of the block needs no mask."""
    return np.triu(np.ones((b - a, b - a), dtype=bool), k=1)


def calibrate_alpha(z: np.ndarray, beta: float, avg_degree: float) -> float:
    """alpha with 2/N * sum_{i<j} sigmoid(alpha - beta d_ij^2) = avg_degree (histogram + bisection)."""
    n = z.shape[0]
    z = z.astype(np.float32)
    span = (z.max(axis=0) - z.min(axis=0)).astype(np.float64)
    max_d2 = float(np.sum(span**2)) * 1.001 + 1e-9  # bounding-box diagonal bounds every d^2 (+ rounding)
    scale = np.float32(_BINS / max_d2)
    sq = np.einsum("ij,ij->i", z, z)
    counts = np.zeros(_BINS, dtype=np.float64)
    for a, b in _row_blocks(n):
        d2 = _block_d2(z, sq, a, b)
        d2 *= scale
        w = b - a
        idx = np.concatenate([d2[:, :w][_upper(a, b)], d2[:, w:].ravel()]).astype(np.int32)
        counts += np.bincount(np.minimum(idx, _BINS - 1, out=idx), minlength=_BINS)
    centres = (np.arange(_BINS) + 0.5) / float(scale)

    def expected_degree(alpha):
        return 2.0 / n * float(counts @ expit(alpha - beta * centres))

    lo, hi = -1.0, 1.0
    while expected_degree(lo) > avg_degree:
        lo *= 2
    while expected_degree(hi) < avg_degree:
        hi *= 2
    for _ in range(60):  # monotone in alpha: bisection to float precision
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if expected_degree(mid) < avg_degree else (lo, mid)
    return 0.5 * (lo + hi)


def sample_edges(z: np.ndarray, alpha: float, beta: float, rng: np.random.Generator) -> np.ndarray:
    """Independent Bernoulli edges over all pairs i < j; (E, 2) int64 with i < j."""
    z = z.astype(np.float32)
    sq = np.einsum("ij,ij->i", z, z)
    out = []
    for a, b in _row_blocks(z.shape[0]):
        t = _block_d2(z, sq, a, b)
        t *= np.float32(-beta)
        t += np.float32(alpha)
        hit = rng.random(t.shape, dtype=np.float32) < expit(t, out=t)
        hit[:, : b - a] &= _upper(a, b)
        r, c = np.nonzero(hit)
        out.append(np.stack([r + a, c + a], axis=1))
    return np.concatenate(out).astype(np.int64) if out else np.zeros((0, 2), dtype=np.int64)


def _check(num_nodes, avg_degree, clusters):
    if num_nodes < 2:
        raise DatasetError(f"synthetic: num_nodes={num_nodes}; need at least 2 nodes")
    if not 0 < avg_degree < num_nodes - 1:
        raise DatasetError(f"synthetic: avg_degree={avg_degree} must lie in (0, num_nodes - 1 = {num_nodes - 1})")
    if clusters < 1:
        raise DatasetError(f"synthetic: clusters={clusters}; need at least one cluster")


def sample_latent_space(
    num_nodes: int,
    avg_degree: float,
    seed: int,
    clusters: int = 3,
    s: float = 1.0,
    beta: float = 2.0,
    noise: float = 0.5,
):
    """(labels, z, edges, alpha) of one latent-space graph; deterministic given the seed."""
    _check(num_nodes, avg_degree, clusters)
    rng = np.random.default_rng(seed)
    labels, z = latent_positions(rng, num_nodes, clusters, s, noise)
    alpha = calibrate_alpha(z, beta, avg_degree)
    return labels, z, sample_edges(z, alpha, beta, rng), alpha


def latent_space_graph(
    num_nodes: int = 10_000,
    avg_degree: float = 15.0,
    seed: int = 0,
    clusters: int = 3,
    s: float = 1.0,
    beta: float = 2.0,
    noise: float = 0.5,
) -> Graph:
    """Just the graph (no features, no split): e.g. the sampler benchmark's 10k-node, degree-15 graph."""
    _, _, edges, _ = sample_latent_space(num_nodes, avg_degree, seed, clusters, s, beta, noise)
    return Graph.from_edges(edges, num_nodes=num_nodes)


@dataclass(frozen=True)
class LatentSpace:
    """The Appendix D.4 graph's parameters (module docstring): nodes, clusters, their spread `s`, the features'
    signal `mu` and width `p`, the edge model's `beta` and `noise`, the mean degree, the test share and the
    quantile beyond which a non-edge is far enough to be a negative."""

    num_nodes: int = 5000
    clusters: int = 3
    s: float = 1.0
    mu: float = 1.0
    p: int = 32
    beta: float = 2.0
    noise: float = 0.5
    avg_degree: float = 15.0
    test_frac: float = 0.1
    neg_quantile: float = 0.9


PAPER_LATENT_SPACE = LatentSpace()


def load_latent_space(seed: int = 0, params: LatentSpace = PAPER_LATENT_SPACE) -> LinkDataset:
    """The Appendix D.4 dataset: 90/10 train/test edges (5% of train held out as valid), features x.

    Negatives are far non-edges (see module docstring) under protocol "original", as many as each
    eval split's positives, so every eval split is balanced as in the paper.
    """
    num_nodes, clusters, s, mu, p = params.num_nodes, params.clusters, params.s, params.mu, params.p
    beta, noise, avg_degree, test_frac, neg_quantile = (
        params.beta,
        params.noise,
        params.avg_degree,
        params.test_frac,
        params.neg_quantile,
    )
    if not 0 < test_frac < 1 or not 0 <= neg_quantile < 1:
        raise DatasetError(f"synthetic: test_frac={test_frac} must be in (0, 1), neg_quantile={neg_quantile} in [0, 1)")
    labels, z, edges, _ = sample_latent_space(num_nodes, avg_degree, seed, clusters, s, beta, noise)
    rng = np.random.default_rng([seed, 1])  # a separate stream: features/split never shift the graph
    w = rng.standard_normal((clusters, p)) / np.sqrt(p)
    x = (np.sqrt(mu) * z @ w + rng.standard_normal((num_nodes, p)) / np.sqrt(p)).astype(np.float32)

    edges = edges[rng.permutation(len(edges))]
    n_test = int(round(test_frac * len(edges)))
    n_valid = int(round(0.05 * (len(edges) - n_test)))
    test, valid, train = np.split(edges, [n_test, n_test + n_valid])
    if len(train) == 0:
        raise DatasetError("synthetic: no train edges were generated; raise avg_degree or num_nodes")

    def d2(pairs):
        return np.sum((z[pairs[:, 0]] - z[pairs[:, 1]]) ** 2, axis=1)

    threshold = float(np.quantile(d2(edges), neg_quantile))
    full = Graph.from_edges(edges, num_nodes=num_nodes)
    negs = sample_non_edges(
        full, n_valid + n_test, rng, accept=lambda q: d2(q) > threshold, what="synthetic far negatives"
    )
    splits = {
        "train": Split(pos=train),
        "valid": Split(pos=valid, neg={"original": negs[:n_valid]}),
        "test": Split(pos=test, neg={"original": negs[n_valid:]}),
    }
    return LinkDataset(
        name="synthetic", graph=training_graph(train, num_nodes, x=x), splits=splits, metric={"original": "mrr"}
    )
