"""Multi-seed report: mean ± std (sample std, as the paper), Markdown layout, CLI errors."""

import json

import pytest

from pipelines import report
from pipelines.core import results


def _result(tmp_path, seed, mrr, hits10, dataset="citeseer", protocol="original", **more):
    d = tmp_path / f"seed{seed}"
    d.mkdir()
    (d / "result.json").write_text(
        json.dumps(
            {
                "dataset": dataset,
                "protocol": protocol,
                "model": "PENCIL",
                "seed": seed,
                "test": {"mrr": mrr, "hits@10": hits10, **more},
            }
        )
    )


def test_mean_std_matches_hand_values():
    mean, std = results.mean_std([0.40, 0.44, 0.48])
    assert mean == pytest.approx(0.44)
    assert std == pytest.approx(0.04)  # sqrt(((-.04)^2 + 0 + .04^2) / 2)
    assert results.mean_std([5.0]) == (5.0, 0.0)


def test_markdown_table_from_three_seeds(tmp_path):
    for seed, (mrr, auc) in enumerate([(0.40, 0.80), (0.44, 0.90), (0.48, 0.85)]):
        _result(tmp_path, seed, mrr, 0.9, auc=auc, ap=0.75)
    out = tmp_path / "report.md"
    assert report.main([str(tmp_path), "--out", str(out)]) == 0
    table = out.read_text().splitlines()
    assert table[0].startswith("| dataset | protocol | model | seeds | mrr |")
    assert table[0].endswith("| hits@100 | auc | ap |")
    assert table[2] == (
        "| citeseer | original | PENCIL | 3 | 44.00 ± 4.00 | – | – | 90.00 ± 0.00 | – | – | – "
        "| 85.00 ± 5.00 | 75.00 ± 0.00 |"
    )
    # The paper's reference row follows, with its number in the metric column it reports.
    assert "| citeseer | original | PENCIL w/o features (paper) | – | 47.51 ± 3.09 |" in table[3]


def test_groups_by_protocol(tmp_path):
    _result(tmp_path, 0, 0.1, 0.2, protocol="heart")
    _result(tmp_path, 1, 0.5, 0.6)
    rows = results.aggregate(results.load_results([tmp_path]))
    assert [(r["protocol"], r["mrr"][0]) for r in rows] == [
        ("heart", pytest.approx(10.0)),
        ("original", pytest.approx(50.0)),
    ]


def test_errors_name_the_problem(tmp_path, capsys):
    with pytest.raises(SystemExit):
        report.main([str(tmp_path / "nope")])
    assert "no such run folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        report.main([str(tmp_path)])
    assert "no result.json" in capsys.readouterr().err
