"""Pencil against the paper's formulas written densely: X~ W0, D^-1(A + I) with the task-token rule, readout.

The dense references below build X~ and Â per sample straight from the token definition (paper §3.1 and
Appendix A), independent of pack()'s message lists, and are compared in float64.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from trainer.data.packing import pack_samples as pack  # hand-built sample dicts
from trainer.model.pencil import ModelConfig, Pencil, Propagation

N_MAX = 12


def random_samples(sizes, n_max=N_MAX, p=0.35, seed=0, num_nodes=50):
    """Random induced-subgraph-like samples: u=0, v=1 never adjacent (the target edge is removed)."""
    rng = np.random.default_rng(seed)
    out = []
    for i, N in enumerate(sizes):
        assert N <= n_max
        e = [(a, b) for a in range(N) for b in range(a + 1, N) if (a, b) != (0, 1) and rng.random() < p]
        rng.shuffle(e)
        e = [(b, a) if rng.random() < 0.5 else (a, b) for a, b in e]  # either orientation, each edge once
        nodes = rng.choice(num_nodes, size=N, replace=False)
        out.append(
            dict(
                cid=100 + i,
                src=int(nodes[0]),
                dst=int(nodes[1]),
                label=float(i % 2),
                nodes=nodes,
                edges=np.array(e, dtype=np.int64).reshape(-1, 2),
            )
        )
    return out


def dense_tokens(sample, n_max):
    """X~ of one sample, (N + 2, 2 n_max + 2), exactly as in the paper's Figure 1."""
    N = len(sample["nodes"])
    A = np.zeros((N, N))
    for a, b in sample["edges"]:
        A[a, b] = A[b, a] = 1
    X = np.zeros((N + 2, 2 * n_max + 2))
    for i in range(N):
        X[i, i] = 1
        X[i, n_max : n_max + N] = A[i]
        X[i, 2 * n_max] = 1  # role [1, 0]
    for k in range(2):  # task tokens copy u / v, role flipped to [0, 1]
        X[N + k, : 2 * n_max] = X[k, : 2 * n_max]
        X[N + k, 2 * n_max + 1] = 1
    return X


def dense_operator(sample, n_max):
    """D^-1 Ã, (N + 2, N + 2): Ã = [X^adj + X^id | 0] (Appendix A), rows normalised."""
    X = dense_tokens(sample, n_max)
    N = len(sample["nodes"])
    A_src = X[:, n_max : n_max + N] + X[:, :N]  # (N + 2, N): all tokens receive, context tokens send
    A = np.concatenate([A_src, np.zeros((N + 2, 2))], axis=1)
    return A / A.sum(1, keepdims=True)


def small_model(**kw):
    cfg = dict(n_max=N_MAX, hidden=16, layers=2, heads=2, ffn=32, dropout=0.0, attention="reference")
    cfg.update(kw)
    torch.manual_seed(0)
    return Pencil(ModelConfig(**cfg))


def dense_forward(model, samples, node_features=None):
    """The whole model per sample with dense matrices and the BertLayer called as-is (no packing)."""
    n = model.cfg.n_max
    w0 = model.w0
    outs = []
    for s in samples:
        X = torch.tensor(dense_tokens(s, n), dtype=w0.dtype)
        A = torch.tensor(dense_operator(s, n), dtype=w0.dtype)
        h = X @ w0
        if node_features is not None:
            ids = list(s["nodes"]) + [s["nodes"][0], s["nodes"][1]]
            h = h + model.features(node_features[ids])
        for blk in model.blocks:
            z = blk.bert(h[None])
            z = (z[0] if isinstance(z, tuple) else z)[0]
            h = z + blk.prop(A @ z)
        N = len(s["nodes"])
        outs.append(model.head(torch.cat([h[N], h[N + 1]])))
    return torch.cat(outs)


# ---------------------------------------------------------------------------- input projection
@pytest.mark.parametrize("dense", [False, True])
def test_embedding_form_equals_dense_projection(dense):
    samples = random_samples([2, 5, 12, 7, 3])
    model = small_model(hidden=40).double()
    batch = pack(samples, N_MAX, dense=dense)
    assert batch.dense == dense
    h = model.embed(batch)
    dense = torch.cat([torch.tensor(dense_tokens(s, N_MAX)) @ model.w0 for s in samples])
    assert h.shape == dense.shape == (batch.num_tokens, 40)
    torch.testing.assert_close(h, dense, rtol=0, atol=1e-12)


@pytest.mark.parametrize("hidden", [16, 64])  # 2 n_max + 2 = 26 rows: tall and wide W0
def test_w0_orthogonal_frozen_saved(hidden):
    model = small_model(hidden=hidden)
    w0 = model.w0.detach().double()
    if w0.shape[0] >= w0.shape[1]:
        torch.testing.assert_close(w0.T @ w0, torch.eye(hidden, dtype=torch.float64), atol=1e-5, rtol=0)
    else:
        torch.testing.assert_close(w0 @ w0.T, torch.eye(w0.shape[0], dtype=torch.float64), atol=1e-5, rtol=0)
    assert not model.w0.requires_grad
    assert "w0" in model.state_dict()
    assert all(p is not model.w0 for p in model.parameters() if p.requires_grad)
    before = model.w0.detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    batch = pack(random_samples([4, 6]), N_MAX)
    model.loss(model(batch), batch.label).backward()
    opt.step()
    assert model.w0.grad is None and torch.equal(model.w0, before)
    # loading restores W0 exactly (it is model state, not re-drawn)
    other = small_model(hidden=hidden)
    torch.nn.init.zeros_(other.w0)
    other.load_state_dict(model.state_dict())
    assert torch.equal(other.w0, model.w0)


# ---------------------------------------------------------------------------- multiplicative residual
@pytest.mark.parametrize("dense", [False, True])
def test_propagation_equals_dense_operator(dense):
    samples = random_samples([12, 2, 6, 9], seed=3)
    batch = pack(samples, N_MAX, dense=dense)
    z = torch.randn(batch.num_tokens, 5, dtype=torch.float64)
    got = Propagation(batch)(z)
    cu = batch.cu_seqlens.tolist()
    want = torch.cat([torch.tensor(dense_operator(s, N_MAX)) @ z[cu[i] : cu[i + 1]] for i, s in enumerate(samples)])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # task rule: the u-task row aggregates exactly what u's context token aggregates, v likewise
    for i in range(len(samples)):
        for k in range(2):
            torch.testing.assert_close(got[batch.task_index[i, k]], got[cu[i] + k])


@pytest.mark.parametrize("dense", [False, True])
def test_task_tokens_are_not_sources(dense):
    batch = pack(random_samples([6, 8], seed=1), N_MAX, dense=dense)
    z = torch.zeros(batch.num_tokens, 3, dtype=torch.float64)
    z[batch.task_index.flatten()] = 1e6  # if any task token sent a message, it would show up
    out = Propagation(batch)(z)
    ctx = batch.role == 0
    assert out[ctx].abs().max() == 0 and out[~ctx].abs().max() == 0


@pytest.mark.parametrize("dense", [False, True])
def test_whole_model_equals_dense_per_sample_reference(dense):
    samples = random_samples([3, 12, 7, 2, 9], seed=5)
    model = small_model().double().eval()
    got = model(pack(samples, N_MAX, dense=dense))
    torch.testing.assert_close(got, dense_forward(model, samples), rtol=0, atol=1e-10)


def test_sparse_and_dense_forms_give_the_same_outputs_and_gradients():
    """The packer picks the form per batch; training must not notice: same logits, same gradients
    (float64), for every trainable parameter, learnable W0 included (it receives the adjacency sum)."""
    samples = random_samples([3, 12, 7, 2, 9, 11], p=0.6, seed=8)
    model = small_model(w0_learnable=True).double().train()
    grads = []
    for dense in (False, True):
        model.zero_grad()
        torch.manual_seed(1)  # same dropout masks (dropout is 0 here, but keep the runs identical)
        batch = pack(samples, N_MAX, dense=dense)
        out = model(batch)
        model.loss(out, batch.label).backward()
        grads.append((out.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=0, atol=1e-12)
    assert grads[0][1].keys() == grads[1][1].keys() and "w0" in grads[0][1]
    for k in grads[0][1]:
        torch.testing.assert_close(grads[0][1][k], grads[1][1][k], rtol=0, atol=1e-10)


# The key projection's bias has a true gradient of exactly 0: it adds q . b to every score of a query's row, and
# softmax is invariant to that shift. Both paths hold rounding noise there, so its error is measured against the
# model's largest gradient rather than its own noise-sized scale (bf16 on an H200 put that ratio at 0.1-0.9).
ZERO_GRAD_PARAMS = ("attention.self.key.bias",)


def assert_grads_close(got: dict, ref: dict, rel: float) -> None:
    """Every gradient within `rel` of its own scale (max |g|); the zero-gradient ones within `rel` of the model's
    largest, and at most 1 % of it in the reference (the premise)."""
    top = max(float(g.abs().max()) for g in ref.values())
    for name, g in ref.items():
        if name.endswith(ZERO_GRAD_PARAMS):
            assert float(g.abs().max()) < 1e-2 * top, f"{name}: gradient {float(g.abs().max()):.2e} is not ~0"
            scale = top
        else:
            scale = max(float(g.abs().max()), 1e-6)
        err = float((got[name] - g).abs().max()) / scale
        assert err < rel, f"{name}: max |error| {err:.2e} of its scale {scale:.2e} (limit {rel:.0e})"


def test_the_key_bias_gradient_is_rounding_noise_and_other_grads_are_compared_to_their_own_scale():
    torch.manual_seed(0)
    model = small_model(attention="sdpa").train()
    batch = pack(random_samples([3, 12, 7, 2, 9, 11], p=0.6, seed=9), N_MAX)
    model.loss(model(batch), batch.label).backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}
    keys = [k for k in grads if k.endswith(ZERO_GRAD_PARAMS)]
    assert keys and all(
        float(grads[k].abs().max()) < 1e-6 * max(float(g.abs().max()) for g in grads.values()) for k in keys
    )
    assert_grads_close(grads, grads, 1e-12)
    name = next(k for k in grads if k.endswith("attention.self.query.weight"))
    off = {k: g + (1e-3 * g.abs().max() if k == name else 0) for k, g in grads.items()}
    with pytest.raises(AssertionError, match="query.weight"):  # 1e-3 of its own scale, over a 5e-4 limit
        assert_grads_close(off, grads, 5e-4)
    assert_grads_close(off, grads, 2e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("bf16", [False, True])
def test_sparse_and_dense_forms_agree_on_cuda(bf16):
    """Device-correct dense path: same logits and gradients as the scatter on CUDA. fp32 (no TF32 by
    default in matmul) agrees to fp32 accuracy; under bf16 autocast bmm rounds its inputs to 8 mantissa
    bits while index_add stays fp32, so outputs within 3e-2 and gradients within 5 % of their scale."""
    samples = random_samples([3, 12, 7, 2, 9, 11] * 4, p=0.6, seed=9)
    model = small_model(attention="sdpa").cuda().train()  # dropout 0
    res = []
    for dense in (False, True):
        model.zero_grad()
        batch = pack(samples, N_MAX, dense=dense).to("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out = model(batch)
        model.loss(out, batch.label).backward()
        res.append((out.float(), {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}))
    tol = 3e-2 if bf16 else 1e-4
    torch.testing.assert_close(res[1][0], res[0][0], atol=tol, rtol=tol)
    assert_grads_close(res[1][1], res[0][1], 5e-2 if bf16 else 1e-3)


# ---------------------------------------------------------------------------- readout
def test_readout_uses_the_two_task_tokens():
    samples = random_samples([4, 7, 5], seed=2)
    batch = pack(samples, N_MAX)
    model = small_model().eval()
    seen = {}
    hook = model.head.register_forward_hook(lambda m, i, o: seen.update(x=i[0]))  # returns None: output kept
    logits = model(batch)
    h = model.encode(batch)
    ends = np.cumsum([len(s["nodes"]) + 2 for s in samples])  # u-task, v-task are the last two of each sample
    want = torch.cat([h[ends - 2], h[ends - 1]], dim=1)
    torch.testing.assert_close(seen["x"], want)
    hook.remove()
    torch.testing.assert_close(logits, model.head(want).squeeze(-1))
    # the logit's gradient w.r.t. the final states touches only those tokens
    h = h.detach().requires_grad_(True)
    model.head(h[batch.task_index].flatten(1)).sum().backward()
    touched = h.grad.abs().sum(1) > 0
    assert touched.nonzero().flatten().tolist() == sorted(batch.task_index.flatten().tolist())


# ---------------------------------------------------------------------------- node features
def test_node_features_path():
    samples = random_samples([5, 8], seed=4)
    batch = pack(samples, N_MAX)
    model = small_model(num_features=3).double().eval()
    feats = torch.randn(50, 3, dtype=torch.float64)
    base = small_model().double()
    base.w0.data.copy_(model.w0)
    h = model.embed(batch, feats)
    x = feats[batch.node]
    torch.testing.assert_close(h, base.embed(batch) + F.gelu(model.features[0](x)))
    # task tokens carry their endpoint's features
    for i, s in enumerate(samples):
        for k in range(2):
            assert int(batch.node[batch.task_index[i, k]]) == int(s["nodes"][k])
    torch.testing.assert_close(model(batch, feats), dense_forward(model, samples, feats), rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="num_features"):
        model(batch)
    with pytest.raises(ValueError, match="num_features"):
        base(batch, feats)
    with pytest.raises(ValueError, match="columns"):
        model(batch, torch.randn(50, 4, dtype=torch.float64))


# ---------------------------------------------------------------------------- losses, training
def test_losses():
    logits = torch.tensor([0.3, -1.2, 2.0])
    labels = torch.tensor([1.0, 0.0, 0.5])
    bce = -(labels * torch.log(torch.sigmoid(logits)) + (1 - labels) * torch.log(1 - torch.sigmoid(logits))).mean()
    torch.testing.assert_close(small_model().loss(logits, labels), bce)
    torch.testing.assert_close(small_model(task="regression").loss(logits, labels), ((logits - labels) ** 2).mean())


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_a_few_steps_decrease_the_loss(task):
    samples = random_samples([4, 9, 6, 12, 3, 8, 5, 10], seed=7)
    batch = pack(samples, N_MAX)
    model = small_model(task=task, attention="sdpa", dropout=0.1)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    model.train()
    losses = []
    for _ in range(25):
        loss = model.loss(model(batch), batch.label)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


# ---------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(hidden=30, heads=4), "hidden"),
        (dict(n_max=1), "n_max"),
        (dict(layers=0), "layers"),
        (dict(dropout=1.0), "dropout"),
        (dict(attention_dropout=1.0), "attention_dropout"),
        (dict(attention_dropout=-0.1), "attention_dropout"),
        (dict(task="ranking"), "task"),
        (dict(attention="xformers"), "attention"),
        (dict(num_features=-1), "num_features"),
        (dict(ffn=0), "ffn"),
    ],
)
def test_config_validation_names_the_field(kw, field):
    base = dict(n_max=12, hidden=32, layers=2, heads=4, ffn=64)
    with pytest.raises(ValueError, match=f"ModelConfig.{field}"):
        ModelConfig(**{**base, **kw})


def test_from_preset():
    from common.presets import get_preset

    cfg = ModelConfig.from_preset("citeseer-small", attention="sdpa")
    p = get_preset("citeseer-small")
    assert (cfg.n_max, cfg.hidden, cfg.layers, cfg.heads, cfg.ffn, cfg.dropout) == (
        p.n_max,
        p.hidden,
        p.layers,
        p.heads,
        p.ffn,
        p.dropout,
    )
    assert cfg.attention == "sdpa"
    assert ModelConfig.from_preset(get_preset("citeseer"), num_features=8).n_max == 842
    with pytest.raises(ValueError, match="unknown field"):
        ModelConfig.from_preset("tiny", hiden=3)


@pytest.mark.parametrize("attention", ["reference", "bucketed"])
def test_attention_dropout_is_its_own_knob(attention):
    """--attention-dropout reaches the packed kernels and nothing else: with hidden dropout 0, training-mode output
    equals evaluation's exactly when attention dropout is 0 and differs when it is 0.5; unset, it is --dropout's."""
    samples = random_samples([4, 9, 6, 12, 3], seed=3)
    batch = pack(samples, N_MAX)

    def train_vs_eval(**kw):
        model = small_model(attention=attention, **kw)
        with torch.no_grad():
            return model.train()(batch), model.eval()(batch)

    trained, evaluated = train_vs_eval(dropout=0.0, attention_dropout=0.0)
    torch.testing.assert_close(trained, evaluated, rtol=0, atol=0)
    trained, evaluated = train_vs_eval(dropout=0.0, attention_dropout=0.5)
    assert (trained - evaluated).abs().max() > 1e-3
    model = small_model(dropout=0.3, attention_dropout=0.0)
    layer = model.blocks[0].bert
    assert (layer.attention.self.dropout.p, layer.attention.output.dropout.p, layer.output.dropout.p) == (0, 0.3, 0.3)
    assert small_model(dropout=0.3).blocks[0].bert.attention.self.dropout.p == 0.3
    assert small_model(dropout=0.3).cfg.attn_dropout == 0.3 and model.cfg.attn_dropout == 0.0


def test_batch_packed_for_a_larger_budget_is_rejected():
    batch = pack(random_samples([3], n_max=20), 20)
    with pytest.raises(ValueError, match="n_max"):
        small_model()(batch)
