"""bench/kg_control.py: the signal-free copy of a knowledge graph keeps every head and relation, draws each tail
from the graph's entities, is seeded, and is read back by the project's own knowledge-graph reader."""

import gzip

import numpy as np
import pytest

from bench import kg_control
from common.datasets.base import DatasetError
from common.datasets.kg import kg_files, read_triples

TRIPLES = {
    "train": ["a\tr1\tb", "b\tr1\tc", "c\tr2\td", "d\tr2\te", "e\tr1\ta"],
    "valid": ["a\tr2\tc"],
    "test": ["b\tr2\te", "x\tr1\ty"],
}


@pytest.fixture
def kg(tmp_path):
    folder = tmp_path / "tiny-kg"
    folder.mkdir()
    for split, lines in TRIPLES.items():
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return folder


def test_heads_and_relations_kept_tails_drawn_from_the_entities(kg, tmp_path):
    out = tmp_path / "control"
    assert kg_control.main(["--data", str(kg), "--out", str(out), "--seed", "3"]) == 0
    files = kg_files(out)
    assert set(files) == {"train", "valid", "test"} and all(p.suffix == ".gz" for p in files.values())
    entities = {"a", "b", "c", "d", "e", "x", "y"}  # every head and tail of the three splits
    for split, lines in TRIPLES.items():
        got = read_triples(files[split])
        want = np.array([line.split("\t") for line in lines], dtype=object)
        assert got.shape == want.shape
        assert (got[:, :2] == want[:, :2]).all()  # head and relation, row by row
        assert set(got[:, 2]) <= entities


def test_seeded(kg, tmp_path):
    text = {}
    for name, seed in (("one", 0), ("two", 0), ("other", 1)):
        kg_control.main(["--data", str(kg), "--out", str(tmp_path / name), "--seed", str(seed)])
        text[name] = [gzip.decompress((tmp_path / name / f"{s}.txt.gz").read_bytes()) for s in TRIPLES]
    assert text["one"] == text["two"]  # bytes, gzip header included (mtime 0)
    assert text["one"] != text["other"]


def test_tails_uniform_not_a_permutation():
    """A permutation would keep each entity's in-degree (a real signal); a uniform draw does not."""
    rows = np.array([["h", "r", "hub"]] * 2000 + [[f"n{i}", "r", f"n{i}"] for i in range(100)], dtype=object)
    drawn = kg_control.control_triples({"train": rows}, seed=0)["train"]
    share = float(np.mean(drawn[:, 2] == "hub"))
    assert share < 0.05  # 1 in 102 entities expected, against 2000 / 2100 in the original


def test_not_a_kg_folder(tmp_path):
    with pytest.raises(DatasetError, match="no train.txt"):
        kg_control.read_folder(tmp_path)
