"""`--preset auto` on a typed graph: the degree input as one more candidate where a relation joins two node kinds
(the candidate lists of typed and untyped graphs, its flags in its folder key and in every run of the chosen one),
and the blend with the per-relation popularity prior decided on a tiny typed validation set by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from common.datasets import DatasetSpec, load_dataset
from common.datasets.kg import KG, triples_dataset
from common.datasets.kinds import NodeKinds
from common.eval_scores import write_scores
from common.heuristics_typed import POPULARITY_PRIOR, typed_scores
from common.set_arrays import encode_queries
from pipelines.auto import blend
from pipelines.auto import search as auto_search
from pipelines.auto.config import PEER_COLUMNS, Candidate, SearchConfig, candidates
from pipelines.auto.final import final_runs
from pipelines.auto.recipe import StageData, blend_stage, heads_have_attributes, joins_two_kinds, mostly_new_heads
from pipelines.auto.records import Choice, SearchPlan
from pipelines.core.config import TrainerOptions
from preprocess.kg_candidates import typed_protocol_candidates
from tests.conftest import needs_ray
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


def test_where_most_validation_heads_are_new_the_degree_candidate_also_trains_cold_heads(tmp_path):
    assert candidates(True, False) == candidates(True) and candidates(False, True) == candidates()
    cands, warm = candidates(True, True), candidates(True)
    degree = cands[1]
    assert degree.cid == "degree-d1n20" and degree.cold_heads == 0.5
    assert degree.overrides() == (*warm[1].overrides(), "--cold-heads", "0.5")
    assert degree.to_dict() == {**warm[1].to_dict(), "cold_heads": 0.5} and "cold_heads" not in warm[1].to_dict()
    assert Candidate.from_dict(degree.to_dict()) == degree and cands[:1] + cands[2:] == warm[:1] + warm[2:]
    # the ratings file's one valid pair is u1's, who rated in training; the heads of its two test pairs never count
    assert not mostly_new_heads(load_dataset(DatasetSpec(str(write_ratings(tmp_path)))))
    train = np.array([[0, 0, 1], [1, 0, 2], [2, 1, 3]])
    for valid, new in (([[3, 0, 0]], True), ([[3, 0, 0], [0, 0, 2]], False), ([[3, 0, 0], [3, 1, 1], [0, 0, 2]], True)):
        triples = {"train": train, "valid": np.array(valid), "test": np.array([[0, 1, 2]])}
        assert mostly_new_heads(triples_dataset("t", triples, 4, ("a", "b"), 0)) is new, valid


def test_where_new_heads_arrive_in_time_the_time_candidate_takes_the_degree_ones_place(tmp_path):
    assert candidates(True, False, True) == candidates(True) and candidates(False, True, True) == candidates()
    cands, cold = candidates(True, True, True), candidates(True, True)
    time = cands[1]
    assert time.cid == "time-d1n20" and time.time_features and time.cold_heads == 0.5 and not time.degrees
    flags = cold[1].overrides()
    degree_flags = ("--degree-features", "40", "--degree-steps", "4")
    at = flags.index("--degree-features")
    assert time.overrides() == (*flags[:at], *flags[at + len(degree_flags) :], "--time-features")
    record = time.to_dict()
    assert record["time_features"] is True and "degrees" not in record and "time_features" not in cold[1].to_dict()
    assert Candidate.from_dict(record) == time and cands[:1] + cands[2:] == cold[:1] + cold[2:]


def test_where_those_heads_bring_attributes_the_peers_candidate_takes_the_time_ones_place(tmp_path):
    assert candidates(True, True, False, True) == candidates(True, True)  # peers read the clock: none without it
    cands, timed = candidates(True, True, True, True), candidates(True, True, True)
    peers = cands[1]
    assert peers.cid == "peers-d1n20" and peers.time_features and peers.peer_features and peers.cold_heads == 0.5
    assert peers.overrides() == (*timed[1].overrides(), "--peer-features")
    record = peers.to_dict()
    assert record == {**timed[1].to_dict(), "cid": "peers-d1n20", "name": "peers", "peer_features": True}
    assert "peer_features" not in timed[1].to_dict()
    assert Candidate.from_dict(record) == peers and cands[:1] + cands[2:] == timed[:1] + timed[2:]
    # the ratings file has no table; with a user table its valid head (u1) has attributes, with an item one not
    ds = load_dataset(DatasetSpec(str(write_ratings(tmp_path))))
    assert not heads_have_attributes(ds)
    x = np.zeros((ds.num_nodes, 2), np.float32)
    x[0, 0] = 1.0  # u1's row
    assert heads_have_attributes(ds.with_features(x))
    assert not heads_have_attributes(ds.with_features(np.roll(x, 4, axis=0)))  # the row of item a instead
    assert not heads_have_attributes(ds.with_features(np.ones((ds.num_nodes, PEER_COLUMNS + 1), np.float32)))


def test_a_w_o_features_twin_drops_the_peer_flag_with_the_table():
    from pipelines.core.trainers import TrainerRun
    from pipelines.core.variants import without_features

    flags = ("--time-features", "--peer-features", "--seed", "0")
    run = TrainerRun(Path("/r/seed0"), "s", "general", 0, "kg", overrides=flags)
    twin = without_features({0: run})[0]
    assert twin.overrides == ("--no-features", "--time-features", "--seed", "0")
    assert str(twin.run_dir) == "/r/no-features/seed0"


def test_the_degree_candidates_folder_key_holds_its_flags(tmp_path):
    cands = candidates(True)
    other = Candidate.from_dict({**cands[1].to_dict(), "degrees": 16})

    def dirs(cs):
        shards = {c.sampling: f"/shards/{c.sampling}" for c in cs}
        plan = SearchPlan(12, cs, shards, {s: {} for s in shards}, KG)
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


# ---------------------------------------------------------------------------- the blend on a typed graph
def user_item():
    """Users 0-5 and items 6-9 (two kinds, one relation user->item). Training: item 6 has 3 raters, 7 two, 8 one,
    9 none, each user one item. Valid: users 3, 4, 5 each rate the popular item 6, against two items they have not
    rated and a padded slot; test: users 0, 1 rate item 7, against 8 and 9."""
    train = np.array([[0, 0, 6], [1, 0, 6], [2, 0, 6], [3, 0, 7], [4, 0, 8], [5, 0, 7]])
    triples = {"train": train, "valid": np.array([[3, 0, 6], [4, 0, 6], [5, 0, 6]])}
    triples["test"] = np.array([[0, 0, 7], [1, 0, 7]])
    kinds = NodeKinds(("user", "item"), np.array([0] * 6 + [1] * 4, np.int32))
    ds = triples_dataset("shop", triples, 10, ("user->item",), 0, kinds=kinds)
    pad = [-1, -1]
    ds.splits["valid"].neg[KG] = np.array([[[3, 8], [3, 9], pad], [[4, 7], [4, 9], pad], [[5, 8], [5, 9], pad]])
    ds.splits["test"].neg[KG] = np.array([[[0, 8], [0, 9]], [[1, 8], [1, 9]]])
    return ds


@dataclass
class TypedSet:
    """The few manifest fields the blend reads, over real query files written as preprocess writes them."""

    root: str
    eval: dict = field(default_factory=dict)
    relations: tuple = ("user->item",)
    targets: object = None

    def queries_path(self, entry: dict) -> str:
        return f"{self.root}/{entry['queries']}"

    def queries_sha256(self, entry: dict) -> None:
        return None


def typed_set(ds, root: Path) -> TypedSet:
    s = TypedSet(str(root))
    for split in ("valid", "test"):
        cands = typed_protocol_candidates(ds, split)
        name = f"{split}-kg.npz"
        (root / name).write_bytes(encode_queries(cands.pos_cid, cands.neg_cid, cands.rel[cands.pos_cid]))
        s.eval[f"{split}/{KG}"] = {"queries": name, "candidates": len(cands), "positives": len(cands.pos_cid)}
    return s


def test_the_popularity_prior_is_log1p_of_each_ends_popularity_by_hand():
    pos, rows = typed_scores(user_item(), "valid", (POPULARITY_PRIOR,))[POPULARITY_PRIOR]
    # (1 + out(u)) (1 + in(i)) - 1: every user rated one item; in(6) 3, in(7) 2, in(8) 1, in(9) 0
    assert pos.tolist() == [7.0, 7.0, 7.0]
    assert rows.tolist() == [[3.0, 1.0, -np.inf], [5.0, 1.0, -np.inf], [3.0, 1.0, -np.inf]]


def test_the_prior_by_cid_keeps_the_padding_out_of_the_last_candidate(tmp_path):
    ds = user_item()
    manifest = typed_set(ds, tmp_path)
    scores = typed_scores(ds, "valid", (POPULARITY_PRIOR,))
    table = blend.by_cid(ds, manifest, "valid", KG, scores)[POPULARITY_PRIOR]
    cands = typed_protocol_candidates(ds, "valid")
    # every distinct triple its prior, the last one too (a padded slot is neg_cid -1: no candidate)
    assert np.isfinite(table).all() and len(table) == len(cands) == 3 + 6
    by_pair = {(int(h), int(t)): table[c] for c, (h, t) in enumerate(zip(cands.src, cands.dst))}
    positives = {(3, 6): 7.0, (4, 6): 7.0, (5, 6): 7.0}
    assert by_pair == {**positives, (3, 8): 3.0, (3, 9): 1.0, (4, 7): 5.0, (4, 9): 1.0, (5, 8): 3.0, (5, 9): 1.0}


def stage(tmp_path, ds, valid_logits, test_logits):
    """The recipe's blend stage over one final seed whose saved scores are the given logits by cid."""
    manifest = typed_set(ds, tmp_path)
    run = tmp_path / "seed0"
    for split, logits in (("valid", valid_logits), ("test", test_logits)):
        write_scores(run / "scores" / f"{split}-{KG}.npz", np.arange(len(logits)), np.asarray(logits), 0)
    choice = Choice(candidates(True)[0], 1, 0, "/shards/set", str(tmp_path / "search"), "mrr", {}, 1, 1, 1)
    data = StageData(ds, ds.without_test(), manifest, KG, {})
    return blend_stage(TrainerOptions("cpu"), choice, {0: run}, data, 2.0, tmp_path)


def test_a_model_that_cannot_tell_the_items_apart_takes_the_prior_at_its_smallest_weight(tmp_path):
    ds = user_item()
    n_valid, n_test = len(typed_protocol_candidates(ds, "valid")), len(typed_protocol_candidates(ds, "test"))
    decision, test = stage(tmp_path, ds, np.zeros(n_valid), np.zeros(n_test))
    # alone: each valid positive ties its 2 real corruptions, rank 2, RR 0.5; with the prior at any weight its item
    # is the most popular of its row, RR 1 on every positive: difference 0.5, SE 0; the smallest weight of equals
    assert decision.key == "popularity prior x 0.25" and decision.heuristic == POPULARITY_PRIOR
    assert decision.decision["means"]["none"] == pytest.approx(0.5) and decision.decision["se"] == 0.0
    assert decision.row_name("PENCIL") == "PENCIL + popularity prior"
    # test, under it: item 7 (2 raters) above 8 (1) and 9 (0) for both users
    assert test[0]["mrr"] == pytest.approx(1.0) and test[0]["mrr/user->item"] == pytest.approx(1.0)


def test_float32_near_ties_of_the_model_stay_ties_in_the_blend_as_the_trainer_ranks_them(tmp_path):
    ds = user_item()
    cands = typed_protocol_candidates(ds, "valid")
    # the positives 1e-6 above their corruptions: float noise between identical subgraphs, a tie for the trainer
    valid = np.where(cands.label == 1, np.float32(1.0) + np.float32(1e-6), np.float32(1.0))
    decision, _ = stage(tmp_path, ds, valid, np.zeros(len(typed_protocol_candidates(ds, "test"))))
    assert decision.decision["means"]["none"] == pytest.approx(0.5)  # float64 would rank each positive first: 1.0
    assert decision.key == "popularity prior x 0.25"


def test_a_model_that_already_ranks_every_positive_first_is_kept_alone(tmp_path):
    ds = user_item()
    cands = typed_protocol_candidates(ds, "valid")
    decision, test = stage(tmp_path, ds, cands.label * 5.0, np.zeros(len(typed_protocol_candidates(ds, "test"))))
    assert decision.key == "none" and decision.row_name("PENCIL") == "PENCIL + prior (none chosen)"
    assert test[0]["mrr"] == pytest.approx(1 / 2)  # the model alone on test: each positive ties both corruptions


# ---------------------------------------------------------------------------- end to end
def write_popular_ratings(path: Path, users: int = 40, items: int = 30, per_user: int = 6, seed: int = 0) -> Path:
    """A ratings file whose items are rated by Zipf popularity, at random times: users and items, one relation."""
    rng = np.random.default_rng(seed)
    weight = 1.0 / np.arange(1, items + 1)
    rows = [(u, i) for u in range(users) for i in rng.choice(items, per_user, replace=False, p=weight / weight.sum())]
    times = rng.permutation(len(rows))
    lines = ["user\titem\trating\ttime"] + [f"u{u:02d}\ti{i:02d}\t4\t{t}" for (u, i), t in zip(rows, times)]
    path.write_text("\n".join(lines) + "\n")
    return path


@needs_ray
@pytest.mark.slow  # the search's shard sets and four candidates' trainers, one final seed
def test_the_search_of_a_ratings_file_tries_the_degree_input_and_blends_the_popularity_prior(tmp_path):
    import json

    import torch

    from common.manifest import read_manifest
    from pipelines.core.runs import load_checkpoint, load_model
    from pipelines.run import main
    from tests.test_typed_run import run_argv
    from trainer.data.degrees import train_degrees

    data = write_popular_ratings(tmp_path / "ratings.tsv")
    assert main(run_argv(data, tmp_path)) == 0
    out = tmp_path / "out" / "ratings" / "auto" / KG
    record = json.loads((out / "search.json").read_text())
    assert record["candidates"] == ["default-d1n20", "degree-d1n20", "deep-d2n10", "wide-d1n50"]
    assert "degree-d1n20" in record["chosen"]["rungs"]["grace"]
    # the degree candidate's search run trained with the input, and loads back (as score, recommend and serve load a
    # run) reading the degrees of its shard set's training graph
    (run,) = (out / "search").glob("degree-d1n20-*")
    ckpt = load_checkpoint(run / "best.pt")
    assert ckpt["config"]["model"]["degrees"] == 40 and ckpt["config"]["model"]["degree_steps"] == 4
    manifest = read_manifest(ckpt["config"]["data"]["shards"])
    model = load_model(ckpt, manifest, torch.device("cpu"))
    assert model.degree.counts.tolist() == train_degrees(manifest, 2).counts.tolist()
    # the chosen candidate's flags reach the final seed (seed 0 evaluates its search run's best.pt with them)
    seed0 = json.loads((out / "seed0" / "config.json").read_text())["model"]
    assert (seed0.get("degrees") or 0) == record["chosen"]["config"].get("degrees", 0)
    # the blend: decided on validation (the prior or the model alone), its row beside the model's in the report
    assert record["blend"]["heuristic"] in ("none", "popularity prior", "recent popularity prior", "l3 prior")
    results = json.loads((tmp_path / "out" / "ratings" / "auto" / "results.json").read_text())
    models = {r["model"] for r in results["table"]}
    assert any(m.startswith("PENCIL w/o features + ") for m in models) and "PENCIL w/o features" in models
    assert {r["model"] for r in results["relations"]} == models
