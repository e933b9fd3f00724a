"""`--preset auto` on a typed graph: the degree input as one more candidate where a relation joins two node kinds
(the candidate lists of typed and untyped graphs, its flags in its folder key and in every run of the chosen one)."""

from __future__ import annotations

import numpy as np

from common.datasets import DatasetSpec, load_dataset
from common.datasets.kg import KG, triples_dataset
from common.datasets.kinds import NodeKinds
from pipelines.auto import search as auto_search
from pipelines.auto.config import Candidate, SearchConfig, candidates
from pipelines.auto.final import final_runs
from pipelines.auto.recipe import joins_two_kinds
from pipelines.auto.search import Choice
from pipelines.core.config import TrainerOptions
from tests.test_typed_run import tiny_typed
from tests.test_user_item_typed import write_ratings

# every field a candidate's record (and so its search folder's key) held before the degree input existed
OLD_FIELDS = {"cid", "name", "sampling", "hidden", "layers", "heads", "ffn", "lr", "lr_schedule", "effective_batch"}


# ---------------------------------------------------------------------------- the candidates
def test_an_untyped_or_one_kind_graph_keeps_its_three_candidates_and_their_records():
    assert candidates() == candidates(False)
    assert [c.name for c in candidates()] == ["default", "deep", "wide"]
    for c in candidates():
        assert set(c.to_dict()) == OLD_FIELDS | {"distances"}  # no degree field: the same record and folder key
        assert "--degree-features" not in c.overrides()
        assert Candidate.from_dict(c.to_dict()) == c


def test_a_graph_of_two_kinds_also_offers_the_default_with_the_degree_input_second():
    cands = candidates(True)
    assert [c.cid for c in cands] == ["default-d1n20", "degree-d1n20", "deep-d2n10", "wide-d1n50"]
    default, degree = cands[0], cands[1]
    # the default's view and model, plus the degree report's settings (D 40, 4 buckets a doubling)
    assert degree.overrides() == (*default.overrides(), "--degree-features", "40", "--degree-steps", "4")
    assert degree.to_dict()["degrees"] == 40 and degree.to_dict()["degree_steps"] == 4
    assert Candidate.from_dict(degree.to_dict()) == degree
    assert cands[0] == candidates()[0] and cands[2:] == candidates()[1:]


def test_the_degree_input_is_offered_only_where_a_relation_joins_two_kinds(tmp_path):
    assert joins_two_kinds(load_dataset(DatasetSpec(str(write_ratings(tmp_path)))))  # users -> items
    assert not joins_two_kinds(tiny_typed())  # a knowledge graph without node kinds
    train = np.array([[0, 0, 1], [1, 0, 2], [2, 1, 3]])
    triples = {"train": train, "valid": np.array([[3, 0, 0]]), "test": np.array([[0, 1, 2]])}
    one_kind = NodeKinds(("entity",), np.zeros(4, np.int32))
    assert not joins_two_kinds(triples_dataset("one", triples, 4, ("a", "b"), 0, kinds=one_kind))
    two = NodeKinds(("drug", "gene"), np.array([0, 0, 0, 1], np.int32))  # b joins drug 2 to gene 3
    assert joins_two_kinds(triples_dataset("two", triples, 4, ("a", "b"), 0, kinds=two))


def test_the_degree_candidates_folder_key_holds_its_flags(tmp_path):
    cands = candidates(True)
    other = Candidate.from_dict({**cands[1].to_dict(), "degrees": 16})

    def dirs(cs):
        shards = {c.sampling: f"/shards/{c.sampling}" for c in cs}
        plan = auto_search.SearchPlan(12, cs, shards, {s: {} for s in shards}, KG)
        return auto_search.Search(SearchConfig(), plan, tmp_path / "search", TrainerOptions("cpu"), slots=2).dirs

    got, changed = dirs(cands), dirs([cands[0], other])
    assert got["degree-d1n20"].name.startswith("degree-d1n20-") and got["degree-d1n20"] != changed["degree-d1n20"]
    assert got["default-d1n20"] == changed["default-d1n20"]  # the same shards: the default's folder is its own


def test_every_final_seed_of_the_degree_candidate_carries_its_flags_seed_0_evaluating_the_search_run(tmp_path):
    degree = candidates(True)[1]
    search_run = tmp_path / "search" / "degree-d1n20-abc"
    search_run.mkdir(parents=True)
    (search_run / "best.pt").write_bytes(b"weights")
    choice = Choice(degree, 3, 2, "/shards/set", str(search_run), "mrr", {}, 6, 2, 2)
    runs = final_runs(TrainerOptions("cpu"), choice, KG, {0: tmp_path / "seed0", 1: tmp_path / "seed1"})
    for seed, run in runs.items():
        flags = run.flags()
        at = flags.index("--degree-features")
        assert flags[at : at + 4] == ["--degree-features", "40", "--degree-steps", "4"], seed
    assert runs[0].eval_weights == str(search_run / "best.pt") and runs[1].eval_weights is None
