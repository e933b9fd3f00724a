"""bench/step_profile.py, the profile behind an MFU number: operator kinds by name, attribution of time to kinds on
hand-made profiler events (device and CPU), and real profiled steps on a tiny model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import Kernel

from bench import step_profile as bp
from bench.workload import synthetic_samples, token_batches
from trainer.data.packing import pack_samples as pack
from trainer.model.pencil import ModelConfig, Pencil


@pytest.mark.parametrize(
    "op, kind",
    [
        ("aten::addmm", bp.MATMUL),
        ("aten::mm", bp.MATMUL),
        ("aten::baddbmm", bp.MATMUL),
        ("aten::_flash_attention_forward", bp.ATTENTION),
        ("aten::_flash_attention_backward", bp.ATTENTION),
        ("aten::_softmax_backward_data", bp.ATTENTION),
        ("aten::scaled_dot_product_attention", bp.ATTENTION),
        ("aten::index_add_", bp.GATHER),
        ("aten::_index_put_impl_", bp.GATHER),
        ("aten::index_select", bp.GATHER),
        ("aten::native_layer_norm_backward", bp.NORM),
        ("aten::gelu_backward", bp.ACTIVATION),
        ("aten::native_dropout", bp.ACTIVATION),
        ("aten::bernoulli_", bp.ACTIVATION),
        ("aten::_to_copy", bp.COPY),
        ("aten::copy_", bp.COPY),
        ("aten::new_zeros", bp.COPY),
        ("aten::cat", bp.COPY),
        ("aten::sum", bp.REDUCTION),
        ("aten::add_", bp.ELEMENTWISE),
        ("aten::mul", bp.ELEMENTWISE),
        ("aten::transpose", bp.VIEW),
        ("aten::_unsafe_view", bp.VIEW),
        ("aten::t", bp.VIEW),
        ("autograd::engine::evaluate_function: AddmmBackward0", bp.HOST),
        ("AddmmBackward0", bp.HOST),
    ],
)
def test_kind_of_hand_values(op, kind):
    assert bp.kind_of(op) == kind


def _event(name, parent=None, kernels=(), self_us=0.0, device=DeviceType.CPU, elapsed=0.0):
    return SimpleNamespace(
        name=name,
        cpu_parent=parent,
        kernels=[Kernel(name, 0, d) for d in kernels],
        self_cpu_time_total=self_us,
        device_type=device,
        is_async=False,
        time_range=SimpleNamespace(elapsed_us=lambda: elapsed),
    )


def test_attribute_on_a_device_owns_kernels_by_their_operator():
    """Kernels belong to the operator that launched them; the optimiser's by ancestry; the rest is unowned."""
    step = _event("Optimizer.step#AdamW.step")
    cpu = [
        _event("aten::linear"),
        _event("aten::addmm", kernels=(40.0, 20.0)),
        _event("aten::index_add_", kernels=(25.0,)),
        _event("aten::_fused_adamw_", parent=step, kernels=(10.0,)),
        step,
        _event("cudaLaunchKernel"),
    ]
    gpu = [_event(f"k{i}", device=DeviceType.CUDA, elapsed=t) for i, t in enumerate((40.0, 20.0, 25.0, 10.0, 5.0))]
    kinds, busy, count = bp.attribute(cpu + gpu, on_device=True)
    assert busy == 100.0 and count == 5
    assert kinds == {bp.MATMUL: [60.0, 2], bp.GATHER: [25.0, 1], bp.OPTIMIZER: [10.0, 1], bp.UNATTRIBUTED: [5.0, 1]}


def test_unowned_kernels_are_named_by_what_the_operators_did_not_launch():
    mm = SimpleNamespace(
        name="aten::mm",
        cpu_parent=None,
        kernels=[Kernel("gemm", 0, 40.0), Kernel("splitk", 0, 5.0)],
        self_cpu_time_total=0.0,
        device_type=DeviceType.CPU,
        is_async=False,
    )
    gpu = [
        _event(n, device=DeviceType.CUDA, elapsed=t)
        for n, t in (("gemm", 40.0), ("splitk", 5.0), ("memset", 3.0), ("memset", 4.0), ("reduce", 1.0))
    ]
    assert bp.unowned_kernels([mm] + gpu) == [("memset", 7.0), ("reduce", 1.0)]
    assert bp.unowned_kernels([mm] + gpu, top=1) == [("memset", 7.0)]
    assert bp.unowned_kernels([mm] + gpu[:2]) == []


def test_a_scope_annotated_on_the_device_is_not_device_time():
    """kineto puts record_function scopes on the device timeline too (gpu_user_annotation): the optimizer's span
    covers its own kernels, so counting it would count them twice (an H200 profile's 'kernels of no operator')."""
    step = _event("Optimizer.step#AdamW.step")
    adamw = _event("aten::_fused_adamw_", parent=step, kernels=(10.0,))
    kernel = _event("aten::_fused_adamw_", device=DeviceType.CUDA, elapsed=10.0)
    span = _event("Optimizer.step#AdamW.step", device=DeviceType.CUDA, elapsed=12.0)
    span.is_user_annotation = True
    kinds, busy, count = bp.attribute([step, adamw, kernel, span], on_device=True)
    assert (busy, count) == (10.0, 1) and kinds == {bp.OPTIMIZER: [10.0, 1]}
    assert bp.unowned_kernels([step, adamw, kernel, span]) == []
    span.is_user_annotation = False  # were it a kernel, it would be device time no operator owns
    assert bp.attribute([step, adamw, kernel, span], on_device=True)[0][bp.UNATTRIBUTED] == [12.0, 1]


def test_attribute_on_cpu_sums_self_times_and_counts_aten_calls():
    engine = _event("autograd::engine::evaluate_function: MmBackward0", self_us=3.0)
    events = [
        _event("aten::mm", parent=engine, self_us=50.0),
        engine,
        _event("aten::view", self_us=1.0),
        _event("aten::layer_norm", self_us=2.0),
        _event("aten::native_layer_norm", self_us=8.0),
    ]
    kinds, busy, count = bp.attribute(events, on_device=False)
    assert (busy, count) == (64.0, 4)
    assert kinds == {bp.MATMUL: [50.0, 1], bp.HOST: [3.0, 0], bp.VIEW: [1.0, 1], bp.NORM: [10.0, 2]}


def _tiny(layers: int, device: str):
    samples = synthetic_samples("ogbl-collab(1,75)", 30, 0)
    torch.manual_seed(0)
    model = Pencil(ModelConfig(n_max=152, hidden=16, layers=layers, heads=2, ffn=32, dropout=0.1)).to(device).train()
    batches = [pack(b, 152).to(device) for b in token_batches(samples, 600)[:2]]
    return model, batches


def test_a_profiled_cpu_step_has_every_kind_and_the_layer_norms_of_the_model():
    """Real steps on CPU: every LayerNorm call shows (3 aten calls per LayerNorm: layer_norm, native_layer_norm,
    native_layer_norm_backward; 2 per layer), the kinds add up to the busy time, the optimiser is its own row."""
    model, batches = _tiny(layers=2, device="cpu")
    m = bp.measure(model, batches, torch.device("cpu"), repeats=1, steps=2)
    assert m["kinds"][bp.NORM][1] == 3 * 2 * 2
    for kind in (bp.MATMUL, bp.ATTENTION, bp.GATHER, bp.ACTIVATION, bp.OPTIMIZER):
        assert m["kinds"][kind][0] > 0, kind
    assert sum(ms for ms, _ in m["kinds"].values()) == pytest.approx(m["busy_ms"])
    # how busy time compares with wall time is a measurement: bench.step_profile reports it (busy/wall) and
    # flags a profile whose busy time exceeds the step's wall time; here only that both were measured
    assert m["busy_ms"] > 0 and m["wall_ms"] > 0 and m["peak_gb"] is None


def test_cli_prints_the_summary_and_the_kinds_of_every_budget(capsys):
    bp.main(
        [
            "--device",
            "cpu",
            "--budgets",
            "300,600",
            "--hidden",
            "16",
            "--layers",
            "1",
            "--heads",
            "2",
            "--ffn",
            "32",
            "--samples",
            "40",
            "--repeats",
            "1",
            "--steps",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert "profile: one step" in out and "profile by kind of operator" in out
    rows = [ln.split() for ln in out.splitlines()]
    assert {r[0] for r in rows if len(r) > 2 and r[1] == "matmul"} == {"300", "600"}


def test_cli_refuses_an_unknown_distribution():
    with pytest.raises(SystemExit, match="--dist: unknown 'ogbl-nope'"):
        bp.main(["--device", "cpu", "--dist", "ogbl-nope"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_profiled_cuda_step_owns_its_kernels():
    """On a GPU the operators own (nearly) all kernel time: matmuls and attention kernels are found by their
    operators, so the kinds explain the step, and the peak memory is read."""
    model, batches = _tiny(layers=2, device="cuda")
    m = bp.measure(model, batches, torch.device("cuda"), repeats=2, steps=2)
    owned = sum(ms for kind, (ms, _) in m["kinds"].items() if kind != bp.UNATTRIBUTED)
    assert m["busy_ms"] > 0 and owned >= 0.9 * m["busy_ms"], f"unowned kernels (ms per step): {m['unowned']}"
    assert m["kinds"][bp.MATMUL][1] > 0 and m["kinds"][bp.ATTENTION][1] > 0 and m["peak_gb"] > 0
