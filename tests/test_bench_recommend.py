"""bench/recommend.py: the cost bench of recommendations runs end to end on a small collab-shaped graph, its
projection follows from its own rates, and its flags fail in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bench import recommend as br
from bench.scale import SHAPES, make_graph
from common.retrieval import retrieve


@pytest.fixture(autouse=True)
def _threads():
    """The bench pins torch to one thread (rates per core); give the rest of the suite its threads back."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_a_small_run_reports_every_stage_and_projects_from_its_own_rates(tmp_path, capsys):
    out = tmp_path / "rec.json"
    assert (
        br.main(
            [
                "--scale",
                "0.01",
                "--nodes",
                "4",
                "--pool",
                "10",
                "--presets",
                "tiny",
                "--retrievers",
                "ra,aa",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rep = json.loads(out.read_text())
    assert [r["retriever"] for r in rep["retrieval"]] == ["ra", "aa"]
    (row,) = rep["scoring"]
    graph = make_graph(SHAPES["ogbl-collab"], 0.01, 2.5, 0)  # the bench's graph, rebuilt: same seed
    queries = np.sort(np.random.default_rng(0).choice(np.flatnonzero(graph.degree > 0), size=4, replace=False))
    assert row["pairs"] == int(retrieve(graph, queries, "ra", 10).count.sum())  # every RA pool entry, once
    assert row["device"] == "cpu" and row["batches"] >= 1
    rates = ("sample_pairs_per_s_core", "pack_pairs_per_s_core", "forward_pairs_per_s", "actor_pairs_per_s")
    assert all(row[k] > 0 for k in rates)
    per_pair = 1 / row["sample_pairs_per_s_core"] + 1 / row["actor_pairs_per_s"]
    assert row["core_h_all_nodes"] == pytest.approx(graph.num_nodes * 10 * per_pair / 3600, rel=1e-12)
    assert "scoring tiny on cpu" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit):
        br.main(["--device", "cuda"])
    assert "--device cuda: no CUDA device is visible" in capsys.readouterr().err


def test_an_unknown_retriever_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit):
        br.main(["--retrievers", "ra,nope"])
    assert "--retrievers: unknown nope" in capsys.readouterr().err
