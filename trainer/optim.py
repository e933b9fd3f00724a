"""The trainer's AdamW: torch's fused kernel on CUDA; on a CPU, torch.optim.AdamW's own update written out.

Why not torch.optim on a CPU: building any torch.optim optimiser imports torch._dynamo (its methods are wrapped
by torch._disable_dynamo), 1.2 s of a CPU trainer's 3.4 s start on the 2-core box, paid by every trainer a
recipe starts (docs/benchmarks/2026-12-04-trainer-start.md). `CpuAdamW` is the update torch runs on a CPU (its
single-tensor path, decoupled weight decay, no amsgrad), operation for operation, so the two give bit-identical
weights; its state_dict has torch's layout, so a last.pt written by either resumes with the other
(tests/test_optim.py holds it to torch.optim.AdamW).
"""

from __future__ import annotations

import torch

BETAS = (0.9, 0.999)  # torch.optim.AdamW's defaults, the trainer's
EPS = 1e-8


def adamw(params: list[torch.nn.Parameter], lr: float, weight_decay: float, device: torch.device):
    """The optimiser of a run on `device`."""
    if device.type == "cuda":  # one fused kernel for all parameters; a second of imports is nothing beside a GPU run
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=BETAS, eps=EPS, fused=True)
    return CpuAdamW(params, lr=lr, weight_decay=weight_decay)


class CpuAdamW:
    """torch.optim.AdamW(params, lr, weight_decay) on CPU tensors, without torch.optim: the same param_groups
    (the loop sets group["lr"] each step), step, zero_grad, state_dict and load_state_dict."""

    def __init__(self, params, lr: float, weight_decay: float, betas=BETAS, eps: float = EPS):
        params = list(params)
        if not params:
            raise ValueError("CpuAdamW got an empty parameter list")
        self.param_groups = [
            {
                "lr": lr,
                "betas": tuple(betas),
                "eps": eps,
                "weight_decay": weight_decay,
                "amsgrad": False,
                "maximize": False,
                "foreach": None,
                "capturable": False,
                "differentiable": False,
                "fused": False,
                "decoupled_weight_decay": True,
                "params": params,
            }
        ]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            lr, wd, eps = float(group["lr"]), group["weight_decay"], group["eps"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state.get(p)
                if state is None:
                    state = self.state[p] = {
                        "step": torch.tensor(0.0, dtype=torch.float32),
                        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                    }
                _update(p, p.grad, state, (lr, beta1, beta2, wd, eps))

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()

    def state_dict(self) -> dict:
        """torch.optim's layout: parameters by their index over the groups, state tensors by reference."""
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        groups = [
            {**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
            for g in self.param_groups
        ]
        return {"state": {index[id(p)]: dict(s) for p, s in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """A state_dict of this class or of torch.optim.AdamW (a last.pt written before this class, or on a GPU)."""
        groups = state_dict["param_groups"]
        params = [p for g in self.param_groups for p in g["params"]]
        if len(groups) != len(self.param_groups) or sum(len(g["params"]) for g in groups) != len(params):
            raise ValueError("the optimiser state does not match the model's parameters")
        for mine, saved in zip(self.param_groups, groups):
            mine.update({k: v for k, v in saved.items() if k not in ("params", "fused", "foreach", "capturable")})
            mine["betas"] = tuple(mine["betas"])
        order = [i for g in groups for i in g["params"]]
        self.state = {}
        for p, i in zip(params, order):
            saved = state_dict["state"].get(i)
            if saved:  # the step count stays a float32 CPU scalar, the moments follow the parameter
                self.state[p] = {
                    "step": saved["step"].detach().to(dtype=torch.float32, device="cpu").clone(),
                    "exp_avg": saved["exp_avg"].detach().to(dtype=p.dtype, device=p.device).clone(),
                    "exp_avg_sq": saved["exp_avg_sq"].detach().to(dtype=p.dtype, device=p.device).clone(),
                }


def _update(p, grad, state, hyper: tuple[float, float, float, float, float]) -> None:
    """torch.optim.adam._single_tensor_adam for one real parameter, decoupled decay, no amsgrad, in its order;
    `hyper`: its group's (lr, beta1, beta2, weight_decay, eps)."""
    lr, beta1, beta2, weight_decay, eps = hyper
    step_t = state["step"]
    step_t += 1
    if weight_decay != 0:
        p.mul_(1 - lr * weight_decay)
    state["exp_avg"].lerp_(grad, 1 - beta1)
    state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step = step_t.item()
    bias_correction1 = 1 - beta1**step
    bias_correction2 = 1 - beta2**step
    step_size = lr / bias_correction1
    denom = (state["exp_avg_sq"].sqrt() / bias_correction2**0.5).add_(eps)
    p.addcdiv_(state["exp_avg"], denom, value=-step_size)
