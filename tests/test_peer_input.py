"""The peer input (trainer/data/peers.py, TimeInput's peer half): the groups a feature table makes, each token's lift
among the nodes sharing the head's attributes, hand-computed on the ratings file of test_user_item_typed (pair k of
ROWS at time k, train 1-17, valid 18, test 19-20) with a user table, and the flag's errors."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from common.manifest import ShardError, read_manifest
from common.shards import Block, load_features
from tests.test_degree_input import tiny_run
from tests.test_time_input import END, FRACTIONS, ORIGIN, SPAN, times_of
from tests.test_user_item_typed import ROWS, write_ratings
from trainer.config import ConfigError, config_from_args
from trainer.data.clock import WIDTH, edge_clocks
from trainer.data.packing import BatchPacker
from trainer.data.peers import ALPHA, PeerClock, PeerGroups, PeerTable, column_groups, peer_groups, peer_tables
from trainer.model.pencil import ModelConfig, Pencil
from trainer.model.time_input import TimeInput

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
# u1..u4: female 1, 0, 1, 0 (half are 1s: both sides are groups); age 20..50 (four quantile bins, one user each)
USERS = "node,female,age\nu1,1,20\nu2,0,30\nu3,1,40\nu4,0,50\n"
U1, U2, U3, U4, A = 0, 1, 2, 3, 4  # node ids: u1..u4, then items a..h
# groups: 0 the users' kind; female 1 -> 1, female 0 -> 2; age bins 3..6
HEAD_GROUPS = {U1: [1, 3], U2: [2, 4], U3: [1, 5], U4: [2, 6]}
MEMBERS = {1: {"u1", "u3"}, 2: {"u2", "u4"}, 3: {"u1"}, 4: {"u2"}, 5: {"u3"}, 6: {"u4"}}


@pytest.fixture(scope="module")
def featured_set(tmp_path_factory):
    """The ratings file as a shard set with the user table."""
    tmp = tmp_path_factory.mktemp("peers")
    (tmp / "users.csv").write_text(USERS)
    cmd = [sys.executable, "-m", "preprocess", "--dataset", str(write_ratings(tmp)), "--sampling", "1,10", "--views"]
    cmd += ["1", "--node-features", f"user={tmp / 'users.csv'}", "--out", str(tmp / "shards"), "-q"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tmp, read_manifest(proc.stdout.decode().strip().splitlines()[-1].split()[-1])


def sums(item: str, members: set[str], now: float, upto: int) -> list[float]:
    """The decayed sums and the count of the item's edges to `members` strictly before `now` (file units)."""
    before = [t for t in times_of(item, upto) if t < now and ROWS[t - 1][0] in members]
    return [*(sum(math.exp(-(now - t) / (f * SPAN)) for t in before) for f in FRACTIONS), float(len(before))]


def expected_lift(head: int, item: str, now: float, upto: int) -> list[float]:
    """The sum over the head's columns of log(A_g / s_g + ALPHA) - log(A_K + ALPHA), by hand."""
    degree = {u: sum(1 for pair in ROWS[:upto] if pair[0] == u) for u in ("u1", "u2", "u3", "u4")}
    whole = sums(item, set(degree), now, upto)
    out = [0.0] * WIDTH
    for g in HEAD_GROUPS[head]:
        share = sum(degree[u] for u in MEMBERS[g]) / sum(degree.values())
        part = sums(item, MEMBERS[g], now, upto)
        for k in range(WIDTH):
            ratio = part[k] / share if share else 0.0
            out[k] += math.log(ratio + ALPHA) - math.log(whole[k] + ALPHA)
    return out


def test_a_column_makes_its_ones_both_sides_or_quantile_bins():
    assert column_groups(np.array([1.0, 0, 1, 0]))[0].tolist() == [0, 1, 0, 1]  # half are 1s: both sides
    group, made = column_groups(np.array([1.0, 0, 0, 0, 0]))  # a fifth: the 0s are nearly everyone, no group
    assert group.tolist() == [0, -1, -1, -1, -1] and made == 1
    group, made = column_groups(np.array([20.0, 30, 40, 50]))  # quartiles at 27.5, 35, 42.5
    assert group.tolist() == [0, 1, 2, 3] and made == 4
    assert column_groups(np.array([3.0, 3, 3]))[1] == 1  # a constant column: one bin


def test_groups_of_a_typed_table_are_per_kind_and_a_node_without_its_kinds_row_has_none(featured_set):
    _, manifest = featured_set
    x = load_features(manifest)
    assert manifest.features["kinds"] == {"item": [0, 0], "user": [0, 2]}  # items came without a table
    groups = peer_groups(x, [tuple(span) for span in manifest.features["kinds"].values()])
    assert groups.num_groups == 7 and groups.kind_of.tolist() == [0] * 7
    assert groups.kind_gid.tolist() == [0, 0, 0, 0] + [-1] * 8  # items have no row in the users' block
    assert {h: groups.head_gid[h].tolist() for h in HEAD_GROUPS} == HEAD_GROUPS
    assert groups.head_gid[A:].tolist() == [[-1, -1]] * 8
    assert groups.member_gid[groups.member_ptr[U3] : groups.member_ptr[U3 + 1]].tolist() == [0, 1, 5]


def test_a_lift_at_the_end_and_at_arrival_matches_the_hand_computed_one(featured_set):
    _, manifest = featured_set
    tables = peer_tables(manifest, load_features(manifest))
    test_end = torch.tensor([(19.0 - ORIGIN) / SPAN], dtype=torch.float64)
    # u4 (a new user: female 0, the top age bin) asks about item a on train + valid at the test boundary
    got = tables["test"].lift(torch.tensor([U4]), torch.tensor([A]), test_end)
    assert got[0].tolist() == pytest.approx(expected_lift(U4, "a", 19.0, upto=18), rel=1e-12)
    # u2's training link to a, asked when u2 arrived (3): only u1's rating at 1 is before it
    arrival = torch.tensor([(3.0 - ORIGIN) / SPAN], dtype=torch.float64)
    got = tables["train"].lift(torch.tensor([U2]), torch.tensor([A]), arrival)
    assert got[0].tolist() == pytest.approx(expected_lift(U2, "a", 3.0, upto=17), rel=1e-12)
    # and u3 on the training graph at its end
    got = tables["train"].lift(torch.tensor([U3]), torch.tensor([A]), torch.tensor([1.0], dtype=torch.float64))
    assert got[0].tolist() == pytest.approx(expected_lift(U3, "a", END, upto=17), rel=1e-12)


def test_a_user_token_a_node_outside_the_table_and_a_head_without_a_kind_lift_nothing(featured_set):
    _, manifest = featured_set
    table = peer_tables(manifest, load_features(manifest))["train"]
    now = torch.ones(4, dtype=torch.float64)
    # u1 as a token of u2's link (its neighbours are items: no user group), an added node 12 and 40, item a as head
    got = table.lift(torch.tensor([U2, U2, U2, A]), torch.tensor([U1, 12, 40, A + 1]), now)
    assert got.tolist() == [[0.0] * WIDTH] * 4


def test_a_table_whose_rows_are_all_zero_makes_no_group_and_lifts_nothing():
    groups = peer_groups(np.zeros((3, 2)), [(0, 2)])
    assert groups.num_groups == 1 and groups.kind_gid.tolist() == [-1] * 3 and not len(groups.member_gid)
    indptr, indices = np.array([0, 1, 2, 2]), np.array([1, 0])  # one edge 0 - 1, at time 5
    table = PeerTable(PeerClock.build(groups, indptr, indices, np.array([5.0, 5.0]), 6.0, 0.0, 6.0), groups)
    got = table.lift(torch.tensor([0, 1]), torch.tensor([1, 0]), torch.ones(2, dtype=torch.float64))
    assert got.tolist() == [[0.0] * WIDTH] * 2


def test_a_batch_reads_its_lift_when_its_link_is_asked_and_heads_read_none(featured_set):
    _, manifest = featured_set
    time = TimeInput(8, peers=True).attach(edge_clocks(manifest), peer_tables(manifest, load_features(manifest)))
    # u2 -> a and u4 -> a, each as its two endpoints alone: tokens u2, a, u2, a, then u4, a, u4, a
    block = Block(*(np.array(x) for x in ([0, 1], [U2, U4], [A, A], [1.0, 1.0], [0, 2, 4], [U2, A, U4, A], [0, 0])))
    batch = BatchPacker.for_set(manifest, "train", manifest.n_max)(block)
    batch.clock = "arrival"  # u2 arrived at 3; u4 has no training edge, so its link is asked at the graph's end
    got = time.peer_lift(batch).tolist()
    assert got[0] == got[2] == got[4] == [0.0] * WIDTH
    assert got[1] == got[3] == pytest.approx(expected_lift(U2, "a", 3.0, upto=17), rel=1e-12)
    assert got[5] == pytest.approx(expected_lift(U4, "a", END, upto=17), rel=1e-12)
    batch.clock = None  # a scoring batch: the newest graph at its end
    assert time.peer_lift(batch).tolist()[5] == pytest.approx(expected_lift(U4, "a", 19.0, upto=18), rel=1e-12)


def test_without_the_peer_input_the_time_model_is_as_before_and_with_it_only_a_linear_is_added():
    cfg = ModelConfig(n_max=4, hidden=16, layers=1, heads=2, ffn=32, dropout=0.0, time_features=True)
    torch.manual_seed(0)
    off = Pencil(cfg)
    torch.manual_seed(0)
    on = Pencil(cfg.replace(peer_features=True))
    assert set(on.state_dict()) - set(off.state_dict()) == {"time.peer_linear.weight", "time.peer_linear.bias"}
    assert all(torch.equal(v, on.state_dict()[k]) for k, v in off.state_dict().items())
    with pytest.raises(ValueError, match="peer_features .* set time_features too"):
        cfg.replace(time_features=False, peer_features=True)


def test_the_flag_needs_the_clock_and_node_features_and_says_so_in_one_line(featured_set, tmp_path):
    argv = ["--shards", "s", "--preset", "tiny", "--out", "o", "--time-features"]
    assert config_from_args([*argv, "--peer-features"]).model.peer_features is True
    with pytest.raises(ConfigError, match="--peer-features: reads the clock: add --time-features"):
        config_from_args(argv[:-1] + ["--peer-features"])
    _, manifest = featured_set
    with pytest.raises(ShardError, match="--peer-features reads the set.s node features, and it ships none"):
        peer_tables(manifest, None)


def test_a_checkpoint_round_trips_with_the_sets_peer_tables(featured_set):
    from pipelines.core.runs import load_model

    tmp, manifest = featured_set
    ckpt = tiny_run(manifest, tmp / "peer-run", "--time-features", "--peer-features")
    assert ckpt["config"]["model"]["peer_features"] is True
    model = load_model(ckpt, manifest, torch.device("cpu"))
    assert torch.equal(model.time.peer_linear.weight, ckpt["model"]["time.peer_linear.weight"])
    assert set(model.time.peers) == {"train", "test"}
    # the scorer's tables are the set's: rebuilt from the same files, row for row
    fresh = peer_tables(manifest, load_features(manifest))["test"]
    assert torch.equal(model.time.peers["test"].rows, fresh.rows)
    assert isinstance(fresh, PeerTable) and PeerClock and PeerGroups
