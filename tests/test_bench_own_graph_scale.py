"""bench.own_graph_scale: its graphs, the stages it reads from a run's log, each stage's peak memory, the table and
its projections (a real run's log lines, times made up: no timing here)."""

from __future__ import annotations

import numpy as np

from bench.own_graph_scale import STAGES, null_edges, project, scale_edges, stage_rows, stages, table

LOG = """\
2026-12-05 04:00:00,000 INFO common.datasets.tables: g.csv: read 10,000 rows in 0.0 s (driver 0.3 GiB)
2026-12-05 04:00:02,000 INFO common.datasets.edgelist: g.csv: graph of 4,972 nodes, 10,000 edges built in 0.0 s
2026-12-05 04:00:02,000 INFO common.datasets.edgelist: g.csv: the graph is undirected: (u, v) and (v, u) are one pair
2026-12-05 04:00:03,000 INFO common.datasets.edgelist: g.csv: split 10,000 edges into 8,500 train / 500 valid
2026-12-05 04:00:04,000 INFO common.datasets.edgelist: g.csv: training graph built in 0.0 s
2026-12-05 04:00:05,000 INFO common.heuristics: g/test: 2000 candidate pairs, 2000 distinct, graph Graph(nodes=4972)
2026-12-05 04:00:05,000 INFO pipelines.auto: blend: validation's 500 negatives and a pool of 2000 more, ranks estimated
2026-12-05 04:00:06,000 INFO preprocess.candidates: training view: 4,000 positives, 12,000 negatives
2026-12-05 04:00:20,000 INFO pipelines.auto: search: 3 candidates, signal valid/original mrr (500 positives)
2026-12-05 04:00:20,000 INFO pipelines.auto: search: 3 candidate(s) to epoch 2 of 6 / 2 of 4 / 2 of 6, 3 to train
2026-12-05 04:02:00,000 WARNING pipelines.auto: search: deep-d2n10: at 0.3 steps/s its grace period (step 500) would end
2026-12-05 04:05:00,000 INFO pipelines.auto: search: default-d1n20 (every candidate peaked at its first epoch)
2026-12-05 04:05:00,000 INFO pipelines: training seed 0 (log: seed0/trainer.log)
2026-12-05 04:08:00,000 INFO common.heuristics: g/valid: 3382 candidate pairs, 3382 distinct, graph Graph(nodes=4972)
2026-12-05 04:08:10,000 INFO pipelines.auto: blend: ra x 256 (ra x 256 beats none by 0.0170 > 2 SE (SE 0.0049))
2026-12-05 04:08:20,000 INFO pipelines.auto: auto: default-d1n20 for 6 epochs, blend ra x 256; 500 s of the budget
2026-12-05 04:08:21,000 INFO pipelines: wrote /r/g/auto/results.json, /r/g/auto/report.md
"""


def at(hms: str) -> float:
    from bench.run_timeline import stamp

    return stamp(f"2026-12-05 {hms},000")


def test_graphs_have_the_size_and_density_asked():
    for edges, degree in ((500, 4.0), (500, 30.0)):
        e = scale_edges(edges, degree, seed=1)
        assert len(e) == edges and (e[:, 0] < e[:, 1]).all()
        assert len(np.unique(e, axis=0)) == edges  # distinct, no self-loops
        assert round(2 * edges / degree) * 0.9 <= e.max() + 1 <= round(2 * edges / degree)  # the mean degree
    np.testing.assert_array_equal(scale_edges(300, 4.0, seed=2), scale_edges(300, 4.0, seed=2))


def test_the_null_control_is_uniform_over_the_same_nodes():
    e = null_edges(2000, 4.0, seed=1)
    assert len(e) == 2000 and (e[:, 0] < e[:, 1]).all() and len(np.unique(e, axis=0)) == 2000
    assert e.max() < 1000 and e.min() >= 0
    # no locality: a uniform pair's ring distance is uniform, where scale_edges' are mostly within a few hops
    assert np.median(e[:, 1] - e[:, 0]) > 200 > np.median(np.diff(np.sort(scale_edges(2000, 4.0, seed=1)), axis=1))


def test_stages_come_from_the_log_in_order(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(LOG)
    start, end = at("03:59:58"), at("04:08:25")
    marks = stages(log, start, end)
    assert [m[0] for m in marks] == list(STAGES)
    walls = {name: b - a for name, a, b in marks}
    assert walls == {
        "load": 4.0,
        "split": 2.0,
        "heuristics": 2.0,
        "shard sets": 14.0,
        "search": 280.0,
        "final seeds": 180.0,
        "blend": 20.0,
        "report": 5.0,
    }
    samples = [(start + s, int(gb * 1e9)) for s, gb in ((1, 0.3), (5, 0.5), (100, 2.5), (400, 1.2), (505, 0.8))]
    rows = stage_rows(marks, samples)
    assert rows["load"] == (4.0, 0.3) and rows["search"] == (280.0, 2.5) and rows["final seeds"] == (180.0, 1.2)
    assert rows["split"] == (2.0, 0.5) and rows["report"] == (5.0, 0.8)
    assert rows["heuristics"] == (2.0, 0.5)  # no sample inside: the nearest one
    # a run that stopped in the search has the stages before it only
    log.write_text("".join(LOG.splitlines(keepends=True)[:11]))
    assert [m[0] for m in stages(log, start, end)] == ["load", "split", "heuristics", "shard sets"]


def run(name, edges, degree, scale):
    per = {s: (10.0 + scale * i, 1.0 + 0.1 * scale * i) for i, s in enumerate(STAGES)}
    return {
        "name": name,
        "edges": edges,
        "nodes": edges // 2,
        "degree": degree,
        "rc": 0,
        "wall_s": sum(v[0] for v in per.values()),
        "peak_gb": max(v[1] for v in per.values()),
        "load_avg": [1.0, 2.0],
        "stages": per,
        "results": {"pencil_mrr": "30.00 (PENCIL)", "heuristic_mrr": "25.00 (RA)", "pencil_auc": "90.00 (PENCIL)"},
    }


def test_table_projects_linearly_and_names_its_projections():
    runs = [run("10k-d4", 10_000, 4.0, 1.0), run("100k-d4", 100_000, 4.0, 10.0)]
    p = project(runs, 1_000_000, budget_s=1800)
    # each stage: the 100k value plus its slope from 10k to 100k over 900k more edges
    assert p["split"] == (round(20.0 + (20.0 - 11.0) * 10, 1), round(2.0 + (2.0 - 1.1) * 10, 2))
    assert p["search"][0] == min(10.0 + 40 + 9 * 4 * 10, 1800)
    out = table(runs, budget_s=1800)
    assert out.count("**projection**") == 2  # 1 M and 10 M
    assert "| 10k-d4 | 10,000 | 5,000 | measured |" in out and "| 10m-d4 | 10,000,000 |" in out
    assert all(line.count("|") == out.splitlines()[0].count("|") for line in out.splitlines())
    assert "30.00 (PENCIL) vs 25.00 (RA)" in out
    growth = next(line for line in out.splitlines() if "growth exponent" in line)
    assert "0.00 / 0.00" in growth  # load: the same at both sizes
    assert "projection" not in table(runs[:1])  # one size gives no slope
    # a failed run is shown, not projected from
    bad = {**run("1m-d4", 1_000_000, 4.0, 100.0), "rc": 1}
    assert "failed (rc 1)" in table(runs + [bad])
