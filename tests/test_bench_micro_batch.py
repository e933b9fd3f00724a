"""bench/micro_batch.py on a tiny shard set, real trainers: a target above the batch's tokens trains it whole,
to the digit (the bench's comparison of every evaluation's scores is not vacuous); one below splits it."""

from __future__ import annotations

import re

from bench import micro_batch
from common.manifest import read_manifest
from tests.test_trainer_data import make_shard_set
from trainer.data.stream import view_stats
from trainer.resolve import micro_batch_links


def test_only_a_batch_over_the_target_is_split(tmp_path, capsys):
    shards = make_shard_set(tmp_path / "set", eval_links=12)
    micro_batch.main(["--shards", str(shards), "--targets", "100000,128", "--epochs", "1"])
    out = capsys.readouterr().out
    rows = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines() if line.strip().startswith(shards.name)]
    by_target = {r[1]: r for r in rows}
    assert set(by_target) == {"0", "100000", "128"}
    links, tokens = view_stats(read_manifest(shards), 0)
    split = micro_batch_links(64, tokens / links, 128)  # the general preset: 64 links a step
    assert 1 < split < 64
    assert by_target["0"][2] == by_target["100000"][2] == "64 x 1"
    assert by_target["128"][2] == f"{split} x {round(64 / split)}"
    assert by_target["100000"][-1] == "yes"  # the same run: every evaluation's scores equal
    assert by_target["128"][-1] == "no"  # other dropout draws and summation order: not the same digits
