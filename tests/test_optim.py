"""trainer.optim.CpuAdamW against its reference, torch.optim.AdamW on a CPU: the same weights bit for bit, the
same state_dict both ways (a last.pt of either resumes with the other), and a CPU trainer that imports neither
torch._dynamo (what the class is for) nor pandas (common.shards.numpy_view's reason)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.test_trainer_data import make_shard_set
from trainer.optim import CpuAdamW, adamw

ROOT = Path(__file__).resolve().parents[1]


def params(seed: int = 1) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in ((6, 5), (5,), (3,), (2, 2, 2))]


def train(opt, ps, steps: range, total: int = 40, lr0: float = 5e-4):
    """`steps` of a `total`-step run with a cosine lr and seeded gradients; parameter 2 gets no gradient on every
    4th step (AdamW leaves it, its moments and its step count alone)."""
    g = torch.Generator().manual_seed(2)
    for s in range(steps.stop):
        grads = [torch.randn(p.shape, generator=g) for p in ps]
        if s < steps.start:
            continue
        for group in opt.param_groups:
            group["lr"] = lr0 * (1 + math.cos(math.pi * s / total)) / 2
        for i, (p, grad) in enumerate(zip(ps, grads)):
            p.grad = None if (i == 2 and s % 4 == 3) else grad
        opt.step()
        opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01, 0.3])
def test_the_same_weights_and_moments_as_torch_adamw_bit_for_bit(weight_decay):
    ref, mine = params(), params()
    ref_opt = torch.optim.AdamW(ref, lr=5e-4, weight_decay=weight_decay)
    my_opt = CpuAdamW(mine, lr=5e-4, weight_decay=weight_decay)
    train(ref_opt, ref, range(40))
    train(my_opt, mine, range(40))
    assert all(torch.equal(a, b) for a, b in zip(ref, mine))
    ref_sd, my_sd = ref_opt.state_dict(), my_opt.state_dict()
    assert ref_sd["state"].keys() == my_sd["state"].keys() == {0, 1, 2, 3}
    for i in ref_sd["state"]:
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(ref_sd["state"][i][key], my_sd["state"][i][key]), (i, key)
    assert ref_sd["state"][2]["step"].item() == 30 and my_sd["state"][0]["step"].item() == 40  # hand count
    ours = {k: v for k, v in my_sd["param_groups"][0].items() if k != "fused"}
    assert ours == {k: v for k, v in ref_sd["param_groups"][0].items() if k != "fused"}


def test_a_first_step_by_hand():
    """One step from zero moments: the bias-corrected update is lr * g / (|g| + eps), after the decay."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = CpuAdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = torch.tensor([0.5, -4.0])
    opt.step()
    decayed = torch.tensor([1.0, -2.0]) * (1 - 0.1 * 0.5)
    assert torch.allclose(p.detach(), decayed - 0.1 * torch.tensor([1.0, -1.0]), atol=1e-6)


@pytest.mark.parametrize("first", ["torch", "ours"])
def test_a_state_dict_of_either_resumes_with_the_other(first):
    """20 steps with one optimiser, its state_dict into the other, 20 more: the weights of 40 uninterrupted torch
    steps (a last.pt written before CpuAdamW, or on a GPU, resumes on a CPU; and back)."""
    make = {"torch": lambda ps: torch.optim.AdamW(ps, lr=5e-4, weight_decay=0.01),
            "ours": lambda ps: CpuAdamW(ps, lr=5e-4, weight_decay=0.01)}  # fmt: skip
    second = "ours" if first == "torch" else "torch"
    whole = params()
    train(make["torch"](whole), whole, range(40))
    ps = params()
    a = make[first](ps)
    train(a, ps, range(20))
    b = make[second](ps)
    b.load_state_dict(a.state_dict())
    train(b, ps, range(20, 40))
    assert all(torch.equal(x, y) for x, y in zip(whole, ps))


def test_a_state_dict_for_other_parameters_is_refused():
    opt = CpuAdamW(params()[:2], lr=1e-3, weight_decay=0.0)
    with pytest.raises(ValueError, match="does not match"):
        opt.load_state_dict(torch.optim.AdamW(params(), lr=1e-3).state_dict())


def test_the_cpu_optimiser_is_ours_and_the_cuda_one_is_torch_fused():
    assert isinstance(adamw(params(), 1e-3, 0.0, torch.device("cpu")), CpuAdamW)
    if torch.cuda.is_available():
        cuda = [p.detach().cuda().requires_grad_() for p in params()]
        opt = adamw(cuda, 1e-3, 0.0, torch.device("cuda"))
        assert isinstance(opt, torch.optim.AdamW) and opt.param_groups[0]["fused"] is True


def test_a_cpu_trainer_imports_neither_torch_dynamo_nor_pandas(tmp_path):
    """Building a torch.optim optimiser imports torch._dynamo (1.2 s of a trainer's start), pyarrow's to_numpy
    pandas (0.6 s): a whole CPU run, training, evaluation and checkpoints, must do neither."""
    shards = make_shard_set(tmp_path / "shards")
    code = (
        "import sys\n"
        "from trainer.config import config_for\n"
        "from trainer.train import run\n"
        f"run(config_for('tiny', {str(shards)!r}, {str(tmp_path / 'run')!r}, device='cpu', progress=False,"
        " epochs=1, data={'num_workers': 0}))\n"
        "print(sorted({'torch._dynamo', 'pandas'} & set(sys.modules)))\n"
    )
    got = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert got.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "run" / "summary.json").is_file()
