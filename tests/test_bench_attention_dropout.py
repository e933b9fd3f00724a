"""bench/attention_dropout.py runs end to end on a tiny shard set: both tables, both arms, real trainers."""

from __future__ import annotations

from bench import attention_dropout
from tests.test_trainer_data import make_shard_set


def test_the_bench_prints_both_tables(tmp_path, capsys):
    shards = make_shard_set(tmp_path / "set", shard_links=(16, 16, 8), eval_links=12)
    attention_dropout.main(["--lengths", "16", "--kernel-repeats", "1", "--shards", str(shards), "--repeats", "1"])
    out = capsys.readouterr().out
    assert "SDPA forward + backward" in out and "CPU trainer, 1 epoch(s)" in out
    trainer_rows = out.split("CPU trainer")[1]
    assert "attention dropout 0.1 (the preset's)" in trainer_rows and "--attention-dropout 0" in trainer_rows
