"""bench/stage_arms.py: the refusals that name the folder (its arms are auto_negatives.arm_values, tested there)."""
from __future__ import annotations

import json

import pytest

from bench import stage_arms


def test_a_folder_without_search_json_is_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit):
        stage_arms.main([str(tmp_path)])
    assert f"{tmp_path}: no search.json" in capsys.readouterr().err


def test_a_run_without_a_stage_record_is_refused_by_name(tmp_path):
    (tmp_path / "search.json").write_text(json.dumps({"selection": {"protocol": "original"},
                                                      "training_negatives": {"chosen": 0.5, "by": "flag"}}))
    with pytest.raises(SystemExit, match="records no training-negatives stage runs"):
        stage_arms.main([str(tmp_path)])
