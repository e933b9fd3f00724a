"""The commands on a trained run, as a user meets them: recommendations never name an edge the user has (every
split's edges are the graph), a moved edge list is found again with --dataset, a --graph snapshot is read in the
run's id kind, the trainer's summary names the user's graph, `pencil serve` refuses in one line before Ray
starts everything it can check, and --write-config never lands on a run's file. Two tiny runs (conftest: string
ids, integer ids) serve every test; each command runs its main() in this process."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import needs_ray, write_edges
from tests.test_run_inputs import files_of, one_error, pairs_file

pytestmark = needs_ray
SCORE, RECOMMEND, EVALUATE, SERVE = (
    "pipelines.score",
    "pipelines.recommend.job",
    "pipelines.recommend.evaluation",
    "pipelines.serve.command",
)


@pytest.fixture
def main_of(capsys, caplog):
    """main_of(module, argv): the command's main() in this process -> (exit status, its stderr and log)."""
    import importlib

    def call(module: str, argv: list) -> tuple[int, str]:
        caplog.clear()
        caplog.set_level(logging.INFO)
        try:
            code = importlib.import_module(module).main([str(a) for a in argv])
        except SystemExit as exc:  # parser.error: exit 2
            code = exc.code
        return code, capsys.readouterr().err + caplog.text

    return call


def edge_set(path: Path) -> set:
    lines = path.read_text().splitlines()[1:]
    return {frozenset(line.split(",")[:2]) for line in lines}


# ---------------------------------------------------------------------------- what recommendations start from
def test_recommendations_never_name_an_edge_the_user_has(shop_run, tmp_path, main_of):
    """Every split's edges are the graph recommended on: a held-out (valid or test) edge is an edge the user
    has, never a recommendation. The training graph alone (--graph train) recommends some of them."""
    from common.datasets import DatasetSpec, load_dataset

    have = edge_set(shop_run["edges"])
    ds = load_dataset(DatasetSpec(str(shop_run["edges"])))
    held_out = {frozenset(ds.node_ids[e]) for s in ("valid", "test") for e in ds.splits[s].pos}
    assert held_out and held_out <= have
    flags = [
        "--checkpoint",
        shop_run["run"],
        "--all-nodes",
        "--k",
        "60",
        "--pool",
        "60",
        "--device",
        "cpu",
        "--no-progress",
    ]
    for graph, out in ((None, tmp_path / "default.parquet"), ("train", tmp_path / "train.parquet")):
        code, err = main_of(RECOMMEND, [*flags, *(["--graph", graph] if graph else []), "--out", out])
        assert code == 0, err[-2000:]
    recs = {name: pq.read_table(tmp_path / f"{name}.parquet").to_pandas() for name in ("default", "train")}
    pairs = {name: {frozenset((a, b)) for a, b in zip(r.node, r.candidate)} for name, r in recs.items()}
    assert not pairs["default"] & have, sorted(map(sorted, pairs["default"] & have))[:5]
    assert pairs["train"] & held_out  # what the old default (a split's graph) recommended


# ---------------------------------------------------------------------------- a moved edge list
def test_a_moved_edge_list_is_found_again_with_dataset(shop_run, tmp_path, main_of):
    edges = shop_run["edges"]
    moved = tmp_path / "moved" / "purchases.csv"
    moved.parent.mkdir()
    shutil.move(edges, moved)
    try:
        pairs = pairs_file(tmp_path / "p.csv", [("u001", "i040")])
        (tmp_path / "q.txt").write_text("u001\n")
        base = {
            SCORE: ["--checkpoint", shop_run["run"], "--pairs", pairs, "--out", tmp_path / "s.parquet"],
            RECOMMEND: [
                "--checkpoint",
                shop_run["run"],
                "--nodes",
                tmp_path / "q.txt",
                "--k",
                "3",
                "--out",
                tmp_path / "r.parquet",
                "--no-progress",
            ],
            EVALUATE: [shop_run["run"], "--pool", "5", "--out", tmp_path / "e.json"],
        }
        for module, argv in base.items():
            line = one_error(*main_of(module, [*argv, "--device", "cpu"]))
            assert f"the run's edge list {edges}: file not found" in line and "pass --dataset PATH" in line, line
            code, err = main_of(module, [*argv, "--device", "cpu", "--dataset", moved])
            assert code == 0, (module, err[-2000:])
        other = write_edges(tmp_path / "other.csv", [(f"n{i}", f"n{(i + 1) % 200}") for i in range(200)])
        line = one_error(*main_of(SCORE, [*base[SCORE], "--device", "cpu", "--dataset", other, "--overwrite"]))
        assert f"--dataset {other}: not the graph this run was trained on" in line
    finally:
        shutil.move(moved, edges)


# ---------------------------------------------------------------------------- ids
def test_score_names_an_empty_cell_by_its_data_row(shop_run, tmp_path, main_of):
    (tmp_path / "p.csv").write_text("src,dst\nu001,i040\nu002,\n")
    line = one_error(
        *main_of(
            SCORE,
            [
                "--checkpoint",
                shop_run["run"],
                "--pairs",
                tmp_path / "p.csv",
                "--out",
                tmp_path / "s.parquet",
                "--device",
                "cpu",
            ],
        )
    )
    assert "column 'dst' has an empty node id in data row 2; fill it or drop the row" in line, line


@pytest.mark.parametrize(
    "odd, expect",
    [
        (
            "18446744073709551615",
            "holds 18446744073709551615 in data row {row}, which does not fit the run's node ids (int64 integers)",
        ),
        ("18446744073709551616", "holds 18446744073709551616 in data row {row}, beyond 64-bit integers"),
        ("abc", "holds 'abc' in data row {row}, not an integer"),
        ("01001", "holds '01001' in data row {row}, a leading zero an integer would drop"),
    ],
)
def test_a_snapshot_is_read_in_the_runs_id_kind(int_run, tmp_path, main_of, odd, expect):
    """A --graph snapshot of a run on integer ids: an id no int64 holds, or not an integer as the loader reads
    them, is one line naming its row, never an OverflowError or ValueError from deep inside."""
    rows = int_run["edges"].read_text().splitlines()
    today = tmp_path / "today.csv"
    today.write_text("\n".join(rows) + f"\n{odd},1001\n")
    pairs = pairs_file(tmp_path / "p.csv", [(1001, 1002)])
    for module, argv in ((SCORE, ["--pairs", pairs]), (RECOMMEND, ["--nodes", pairs])):
        if module == RECOMMEND:
            (tmp_path / "q.txt").write_text("1001\n")
            argv = ["--nodes", tmp_path / "q.txt", "--no-progress"]
        line = one_error(
            *main_of(
                module,
                [
                    "--checkpoint",
                    int_run["run"],
                    *argv,
                    "--graph",
                    today,
                    "--out",
                    tmp_path / "o.parquet",
                    "--device",
                    "cpu",
                ],
            )
        )
        assert f"--graph {today}: column 'src' {expect.format(row=len(rows))}" in line, line
        assert "Traceback" not in line and "OverflowError" not in line


def test_pairs_with_a_leading_zero_name_no_integer_node(int_run, tmp_path, main_of):
    pairs = pairs_file(tmp_path / "p.csv", [(1001, 1002), ("01003", 1004)])
    line = one_error(
        *main_of(
            SCORE,
            ["--checkpoint", int_run["run"], "--pairs", pairs, "--out", tmp_path / "s.parquet", "--device", "cpu"],
        )
    )
    assert "unknown node ids (first: data row 2, (01003, 1004))" in line, line


# ---------------------------------------------------------------------------- the trainer's summary
def test_the_summary_names_the_users_graph_and_reports_without_the_papers_rows(shop_run, capsys):
    """The tiny preset is citeseer's; a run of it on shop.csv is the user's graph, in its summary and report."""
    from pipelines import report

    summary = json.loads((shop_run["run"] / "summary.json").read_text())
    assert summary["dataset"] == "shop" and summary["own_graph"] is True
    assert report.main([str(shop_run["run"] / "summary.json")]) == 0
    table = capsys.readouterr().out
    assert "| shop | original |" in table and "(paper)" not in table and "citeseer" not in table


# ---------------------------------------------------------------------------- serve: every check before Ray
def serve_args(run: dict, state: Path, *extra, port: int | None = None) -> list:
    from pipelines.core.ray_head import free_ports

    return ["--checkpoint", run["run"], "--state", state, "--port", port or free_ports(1)[0], "--device", "cpu", *extra]


def served_log(run: dict, state: Path, graph: str = "all", edits: int = 2) -> Path:
    """A state folder whose edit log holds `edits` edits of the graph `graph` of the run, as a service left it."""
    from pipelines.serve.command import ServeCommand, build_parser
    from pipelines.serve.edit_log import EditLog
    from pipelines.serve.start import served_graph

    s = ServeCommand.from_args(
        build_parser().parse_args([str(a) for a in serve_args(run, state, "--graph", graph)])
    ).settings
    log = EditLog(state, served_graph(s))
    for seq in range(1, edits + 1):
        log.append({"seq": seq, "add": [["u001", f"i{seq:03d}"]], "remove": []})
    log.close()
    return state / "edits.jsonl"


def test_serve_refuses_what_it_can_check_before_ray(shop_run, tmp_path, main_of, monkeypatch):
    """Each in one line naming the flag or the file, before Ray starts (a start that reached Ray would fail
    only after Serve's retries, with Serve's generic message), and nothing of the state folder changed."""
    import pipelines.serve.command as command

    monkeypatch.setattr(command, "run_service", lambda *a, **k: pytest.fail("Ray was started"))
    (tmp_path / "file").write_text("")
    broken = served_log(shop_run, tmp_path / "broken")
    broken.write_bytes(broken.read_bytes() + b'{"seq": 3, "add": [[1, \n')
    other = served_log(shop_run, tmp_path / "other", graph="train")  # a log of another graph (the split's)
    unrelated = tmp_path / "unrelated" / "edits.jsonl"
    unrelated.parent.mkdir()
    unrelated.write_bytes(b"name,count\nmine,1\nhalf a line")
    cases = [
        ((tmp_path / "file",), "--state {p}: is a file; pass a folder for the edit log"),
        ((tmp_path / "broken",), f"{broken}: line 4 is not a JSON object"),
        ((tmp_path / "other",), f"{other}: holds the edits of another graph (shop train graph"),
        ((tmp_path / "unrelated",), f"{unrelated}: not a PENCIL edit log of format 1 (line 1)"),
        ((tmp_path / "s", "port"), "--port 70000: must be from 1 to 65535"),
        ((shop_run["run"],), f"--state {shop_run['run']}: is the run folder"),
    ]
    for (state, *extra), expect in cases:
        before = files_of(state.parent)
        line = one_error(*main_of(SERVE, serve_args(shop_run, state, port=70000 if extra else None)))
        assert expect.format(p=state) in line, (expect, line)
        assert files_of(state.parent) == before  # nothing cut, nothing written
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    line = one_error(*main_of(SERVE, serve_args(shop_run, tmp_path / "s")))
    assert "RAY_ADDRESS=127.0.0.1:1: no Ray cluster answers there" in line


def test_serve_on_an_edited_edge_list_refuses_and_leaves_the_state_unbound(shop_run, tmp_path, main_of, monkeypatch):
    """The edited edge list is refused before Ray, and the state folder stays free for the restored file: a
    log is bound to a graph by its first edit only."""
    import pipelines.serve.command as command
    from pipelines.serve.edit_log import EditLog

    started = []
    monkeypatch.setattr(command, "run_service", lambda *a, **k: started.append(1) or 0)
    original = shop_run["edges"].read_bytes()
    lines = original.decode().splitlines()
    shop_run["edges"].write_text("\n".join(lines[:-40]) + "\n")
    try:
        line = one_error(*main_of(SERVE, serve_args(shop_run, tmp_path / "state")))
        assert f"{shop_run['edges']}: not the graph this run was trained on" in line and not started
    finally:
        shop_run["edges"].write_bytes(original)
    assert main_of(SERVE, serve_args(shop_run, tmp_path / "state"))[0] == 0 and started == [1]
    EditLog(tmp_path / "opened", {"fingerprint": "a", "nodes": 1, "edges": 0, "source": "a"}).close()  # no edit
    EditLog(tmp_path / "opened", {"fingerprint": "b", "nodes": 1, "edges": 0, "source": "b"}).close()  # still free


def test_serve_says_what_its_log_replays_and_refuses_yesterdays_log_for_todays_snapshot(
    shop_run, tmp_path, main_of, monkeypatch
):
    import pipelines.serve.command as command

    monkeypatch.setattr(command, "run_service", lambda *a, **k: 0)
    log, torn = served_log(shop_run, tmp_path / "state", edits=3), b'{"seq":4,"add":[["u0'
    log.write_bytes(log.read_bytes() + torn)
    code, err = main_of(SERVE, serve_args(shop_run, tmp_path / "state"))
    assert code == 0 and f"replaying 3 edit(s); its torn last line ({len(torn)} bytes, an edit never " in err, err
    yesterday = write_edges(
        tmp_path / "yesterday.csv", [line.split(",") for line in shop_run["edges"].read_text().splitlines()[1:]]
    )
    log = served_log(shop_run, tmp_path / "daily", graph=str(yesterday), edits=1)
    today = tmp_path / "today.csv"
    today.write_text(yesterday.read_text() + "u999,i001\n")
    line = one_error(*main_of(SERVE, serve_args(shop_run, tmp_path / "daily", "--graph", today)))
    assert f"{log}: holds the edits of another graph ({yesterday}" in line and "pass a new --state" in line, line


def test_write_config_never_lands_on_a_runs_file(shop_run, tmp_path, main_of, monkeypatch):
    monkeypatch.delenv("PENCIL_SERVE_TOKEN", raising=False)
    before = (files_of(shop_run["run"]), shop_run["edges"].read_bytes())
    for out, expect in (
        (shop_run["run"] / "best.pt", "is --checkpoint"),
        (shop_run["edges"], "is the run's edge list"),
    ):
        line = one_error(*main_of(SERVE, serve_args(shop_run, tmp_path / "state", "--write-config", out)))
        assert f"--write-config {out}: {expect}" in line, line
    assert before == (files_of(shop_run["run"]), shop_run["edges"].read_bytes())
    monkeypatch.setenv("PENCIL_SERVE_TOKEN", "s3cret")
    relative = relative_run(shop_run, tmp_path)  # trained with --shards relative to the folder it ran in
    monkeypatch.chdir(shop_run["root"])
    code, err = main_of(
        SERVE, ["--checkpoint", relative, "--state", tmp_path / "state", "--write-config", tmp_path / "serve.yaml"]
    )
    assert code == 0 and "the token (PENCIL_SERVE_TOKEN) is not in" in err, err
    import yaml

    config = yaml.safe_load((tmp_path / "serve.yaml").read_text())
    assert config["applications"][0]["args"]["shards"] == str(shop_run["shards"].resolve())
    assert "s3cret" not in (tmp_path / "serve.yaml").read_text()
    assert main_of(SERVE, serve_args(shop_run, tmp_path / "state", "--write-config", tmp_path / "serve.yaml"))[0] == 0
    (tmp_path / "notes.yaml").write_text("mine: 1\n")
    line = one_error(*main_of(SERVE, serve_args(shop_run, tmp_path / "s", "--write-config", tmp_path / "notes.yaml")))
    assert "already exists and is not a config file of this command" in line
    assert (tmp_path / "notes.yaml").read_text() == "mine: 1\n"


def relative_run(run: dict, tmp_path: Path) -> Path:
    """A copy of the run's best.pt whose shard set is named relative to the run's root (as when it was trained
    from there)."""
    import os

    import torch

    ckpt = torch.load(run["run"] / "best.pt", weights_only=True)
    ckpt["config"]["data"]["shards"] = os.path.relpath(run["shards"], run["root"])
    (tmp_path / "relative").mkdir()
    torch.save(ckpt, tmp_path / "relative" / "best.pt")
    return tmp_path / "relative" / "best.pt"
