"""bench/gpu_report.py, the GPU check's report, on a hand-made OUT folder: it runs for real only on a lent GPU,
so its parsing of the CUDA step-bench table (printed here by bench.trainer's own printer) and its loop / bench
ratio are checked against hand-computed values on CPU."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

from bench import gpu_report
from bench.workload import print_table

CUDA_COLUMNS = [
    "lengths",
    "mean N",
    "max N",
    "B",
    "tokens",
    "padded",
    "path",
    "step ms",
    "vs padded",
    "tokens/s",
    "MFU",
]


def cuda_step_log(rows: list[tuple[str, float]]) -> str:
    """What `python -m bench.trainer --sections step` prints on CUDA, for (path, tokens/s) rows."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_table(
            "step time (forward+backward+AdamW), cuda, ...",
            CUDA_COLUMNS,
            [
                [
                    "citeseer(2,20)",
                    "38.9",
                    842,
                    "1600",
                    "65000",
                    "1400000",
                    path,
                    "35.9",
                    "3.48x",
                    f"{tps:.3g}",
                    "18.5%",
                ]
                for path, tps in rows
            ],
        )
    return "progress noise\n" + buf.getvalue()


def test_bench_tokens_per_s_reads_the_cuda_table():
    text = cuda_step_log([("sdpa", 4.6e5), ("flash_varlen", 1.59e6), ("flash_varlen+compile", 2.1e6)])
    assert gpu_report.bench_tokens_per_s(text) == {"sdpa": 4.6e5, "flash_varlen": 1.59e6, "flash_varlen+compile": 2.1e6}
    assert gpu_report.bench_tokens_per_s("a CPU table has no tokens/s column\n") == {}


def test_report_has_the_loop_over_bench_ratio_and_unfinished_seeds(tmp_path):
    (tmp_path / "step-citeseer.log").write_text(cuda_step_log([("sdpa", 5e5), ("flash_varlen", 1.6e6)]))
    loop = tmp_path / "loop"
    loop.mkdir()
    windows = [9e5, 1.2e6, 1.3e6, 1.4e6]  # the first is warm-up and left out: median of the rest 1.3e6
    loop.joinpath("metrics.jsonl").write_text(
        "\n".join(
            [json.dumps({"event": "train", "step": 5 * (i + 1), "tokens_per_s": t}) for i, t in enumerate(windows)]
            + [json.dumps({"event": "eval", "split": "valid", "mrr": 0.4})]
        )
    )
    loop.joinpath("summary.json").write_text(json.dumps({"attention_backend": "flash_varlen"}))
    (tmp_path / "citeseer" / "seed0").mkdir(parents=True)
    (tmp_path / "citeseer" / "seed0" / "summary.json").write_text(
        json.dumps(
            {
                "best_epoch": 7,
                "valid": {"mrr": 0.6},
                "test": {"mrr": 0.5},
                "train_time_s": 80,
                "attention_backend": "flash_varlen",
            }
        )
    )
    (tmp_path / "citeseer-seed1.log").write_text("python -m trainer: error: CUDA out of memory | retry\n")
    gpu_report.main([str(tmp_path), "2", "480", "| step-citeseer | ok | 60 |"])
    text = (tmp_path / "gpu_check.md").read_text()
    assert "Loop: 1.3e+06 tokens/s (median of 3 logged windows" in text
    assert "Loop / bench: **81%**" in text  # 1.3e6 / 1.6e6 = 0.8125
    assert "| 0 | 7 | 60.00 | 50.00 | 80 | flash_varlen |" in text
    assert (
        "| 1 | - | - | - | - | not finished (citeseer-seed1.log: "
        "python -m trainer: error: CUDA out of memory / retry) |" in text
    )
    assert "Test MRR 50.00 ± 0.00 over 1 seed(s)" in text
    assert "| step-citeseer | ok | 60 |" in text and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_form_sweep_times_both_graph_forms_on_cuda():
    """The GPU check's sparse/dense crossover (bench.loader --sections form on CUDA) runs and reports both forms."""
    from bench.loader import form_sweep

    rows = form_sweep(tokens=2048, repeats=1, device="cuda")
    assert [r["density"] for r in rows][:2] == [0.002, 0.005]
    assert all(r["sparse_ms"] > 0 and r["dense_ms"] > 0 and r["dense_speedup"] > 0 for r in rows)


def test_report_carries_the_profile_tables(tmp_path):
    """bench.step_profile's two tables (summary, kinds) reach the "
    "report under their own heading, progress noise dropped."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_table(
            "profile: one step (forward+backward+AdamW), ogbl-collab(1,75), ...",
            ["budget", "busy/wall"],
            [[65536, "71%"]],
        )
        print_table(
            "profile by kind of operator (ms per step, ...)", ["budget", "kind", "ms"], [[65536, "matmul", "30.5"]]
        )
    (tmp_path / "profile-collab.log").write_text("Loading: 100%|####|\n" + buf.getvalue())
    gpu_report.main([str(tmp_path), "1", "480"])
    text = (tmp_path / "gpu_check.md").read_text()
    section = text.split("## Profile of one step, collab-like lengths, 512 x 8")[1].split("##")[0]
    assert "65536        71%" in section and "65536  matmul  30.5" in section and "Loading" not in section


def test_a_seed_cut_off_by_the_time_limit_reports_its_best_validation_so_far(tmp_path):
    """A seed still running when the device call ends: the row shows test at the best validation logged so far
    (the first of equal bests, as the trainer keeps), and a line cut by the kill is skipped."""
    seed = tmp_path / "citeseer" / "seed0"
    seed.mkdir(parents=True)
    evals = [
        (10, 1, "valid", 0.60),
        (10, 1, "test", 0.40),
        (20, 2, "valid", 0.65),
        (20, 2, "test", 0.47),
        (30, 3, "valid", 0.65),
        (30, 3, "test", 0.52),
        (40, 4, "valid", 0.61),
    ]
    seed.joinpath("metrics.jsonl").write_text(
        "\n".join(
            json.dumps({"event": "eval", "step": st, "epoch": ep, "split": sp, "mrr": m}) for st, ep, sp, m in evals
        )
        + '\n{"event": "eval", "step": 50, "epo'
    )
    (tmp_path / "citeseer-seed0.log").write_text("epoch 4 valid mrr 0.61\n")
    gpu_report.main([str(tmp_path), "1", "480"])
    text = (tmp_path / "gpu_check.md").read_text()
    assert (
        "| 0 | 2 (so far) | 65.00 | 47.00 | - | not finished; best "
        "validation so far (citeseer-seed0.log: epoch 4 valid mrr 0.61) |" in text
    )
    assert "Test MRR" not in text  # no finished seed: no mean
