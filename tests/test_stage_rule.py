"""bench/stage_rule.py: each rule's pick on hand-made half-A values (the current rule is
auto_negatives.choose_fraction itself; the tolerance rules relax only its no-loss check, by k standard errors)."""
from __future__ import annotations

import pytest

from bench.stage_rule import pick, rules


def _arms(sel_u, sel_h, rep_u=0.50, rep_h=0.50, auc_u=0.90, auc_h=0.90):
    return {0.0: {"selection": sel_u, "reported": rep_u, "auc": auc_u},
            0.5: {"selection": sel_h, "reported": rep_h, "auc": auc_h}}


SE = {"reported": 0.01, "auc": 0.002}


@pytest.mark.parametrize("arms, expected", [
    # hard wins selection, no loss elsewhere: every rule but "uniform" picks hard
    (_arms(0.30, 0.31), {"uniform": 0, "hard": 0.5, "selection only": 0.5, "current": 0.5,
                         "tolerance 1 SE": 0.5, "tolerance 2 SE": 0.5}),
    # hard wins selection, loses 1.5 SE of MRR: only the 2-SE tolerance (and the selection-only rule) keep it
    (_arms(0.30, 0.31, rep_h=0.485), {"uniform": 0, "hard": 0.5, "selection only": 0.5, "current": 0,
                                      "tolerance 1 SE": 0, "tolerance 2 SE": 0.5}),
    # hard loses 0.5 SE of AUC: both tolerances keep it, the current rule does not
    (_arms(0.30, 0.31, auc_h=0.899), {"uniform": 0, "hard": 0.5, "selection only": 0.5, "current": 0,
                                      "tolerance 1 SE": 0.5, "tolerance 2 SE": 0.5}),
    # a selection tie keeps uniform under every conditional rule
    (_arms(0.30, 0.30, rep_h=0.9), {"uniform": 0, "hard": 0.5, "selection only": 0, "current": 0,
                                    "tolerance 1 SE": 0, "tolerance 2 SE": 0}),
])
def test_each_rule_picks_on_half_a(arms, expected):
    assert list(expected) == list(rules())
    assert {r: pick(r, arms, SE) for r in rules()} == expected


@pytest.mark.parametrize("bench", ["prior_rule", "stage_rule"])
def test_the_halving_benches_refuse_fewer_than_one_halving(bench, tmp_path, capsys):
    import importlib
    with pytest.raises(SystemExit):
        importlib.import_module(f"bench.{bench}").main([str(tmp_path), "--halvings", "0"])
    assert "--halvings: 0; pass at least 1" in capsys.readouterr().err
