"""pencil serve's graph state and edit log without HTTP: ids old and new, edits validated and applied in order,
the log durable, replayed, cut after a torn append, refused when damaged, locked, or of another graph; and the
coalescing of batches that wait for the model."""

import asyncio
import json
import os
from pathlib import Path

import numpy as np
import pytest

from common.graph import Graph
from pipelines.serve.coalesce import Coalescer
from pipelines.serve.edit_log import LOG_NAME, EditLog, StateError
from pipelines.serve.state import GraphState, ServeError

# 0-1, 1-2, 2-3; node 4 isolated
EDGES = [[0, 1], [1, 2], [2, 3]]


def plain_state(max_new: int = 10) -> GraphState:
    return GraphState(Graph.from_edges(EDGES, num_nodes=5), None, max_new)


def named_state() -> GraphState:
    return GraphState(Graph.from_edges(EDGES, num_nodes=5), np.array(["a", "b", "c", "d", "e"], dtype=object), 10)


def edit(state: GraphState, body: dict) -> dict:
    record = {"seq": state.seq + 1, **state.edit_record(body)}
    state.apply([record])
    return record


def status_of(fn, *args) -> tuple[int, str]:
    with pytest.raises(ServeError) as err:
        fn(*args)
    return err.value.status, err.value.message


def test_plain_ids_are_indices_and_new_ones_grow_the_graph():
    s = plain_state()
    assert s.ids.index("3") == 3 and s.ids.index(4) == 4
    assert status_of(s.ids.index, 5) == (404, "unknown node 5: not in the serving graph (add it with POST /edges)")
    assert status_of(s.ids.index, "x")[0] == 400
    edit(s, {"add": [[4, 7]]})
    assert s.graph.num_nodes == 8 and s.graph.neighbors(7).tolist() == [4] and s.ids.user(7) == 7
    code, message = status_of(s.edit_record, {"add": [[0, 100]]})
    assert code == 400 and "a new node takes an id from 8 to 17" in message


def test_named_ids_take_the_next_index_in_the_order_edits_name_them():
    s = named_state()
    edit(s, {"add": [["e", "zz"], ["zz", "aa"], [1, "b"]]})  # an integer names the text id "1"
    assert s.ids.index("zz") == 5 and s.ids.index("aa") == 6 and s.ids.index(1) == 7
    assert s.ids.users(s.graph.neighbors(s.ids.index("zz"))) == ["e", "aa"]
    assert status_of(s.ids.index, "nope") == (
        404,
        "unknown node 'nope': not in the serving graph (add it with POST /edges)",
    )


def test_edits_are_validated_before_anything_changes():
    s = plain_state()
    cases = [
        ([1], 400, "the body must be a JSON object"),
        ({"add": [[0, 1]], "nodes": []}, 400, "unknown field 'nodes'"),
        ({"add": 3}, 400, "'add' must be a list of [u, v] pairs"),
        ({"add": [[0, 1, 2]]}, 400, "'add'[0]: expected a pair [u, v], got [0, 1, 2]"),
        ({"add": [[0, 1.5]]}, 400, "'add'[0]: node id 1.5 must be an integer id"),
        ({"add": [[2, 2]]}, 400, "'add'[0]: pairs node 2 with itself"),
        ({}, 400, "an edit needs at least one pair"),
        ({"remove": [[0, 99]]}, 404, "'remove': unknown node 99"),
    ]
    for body, code, text in cases:
        got, message = status_of(s.edit_record, body)
        assert got == code and text in message, (body, message)
    assert s.seq == 0 and s.graph.num_edges == 3


def test_records_apply_in_order_and_the_last_edit_of_an_edge_wins():
    a, b = plain_state(), plain_state()
    records = [edit(a, {"add": [[0, 3]]}), edit(a, {"remove": [[0, 3], [1, 2]]}), edit(a, {"add": [[1, 2], [4, 6]]})]
    assert b.apply(records) and not b.apply(records)  # one rebuild for all; a second time changes nothing
    assert a.graph.fingerprint() == b.graph.fingerprint() and a.seq == b.seq == 3
    assert b.graph.edge_array().tolist() == [[0, 1], [1, 2], [2, 3], [4, 6]]
    with pytest.raises(RuntimeError, match="must be applied in order"):
        plain_state().apply(records[1:])


GRAPH = {"fingerprint": "f00", "nodes": 5, "edges": 3, "source": "test graph"}


def test_the_log_is_durable_replayed_and_cut_after_a_torn_append(tmp_path):
    log = EditLog(tmp_path, GRAPH)
    s = plain_state()
    for body in ({"add": [[0, 3]]}, {"remove": [[1, 2]]}):
        record = {"seq": s.seq + 1, **s.edit_record(body)}
        log.append(record)
        s.apply([record])
    log.close()
    with open(tmp_path / LOG_NAME, "ab") as f:  # a crash in the middle of the third append
        f.write(b'{"seq":3,"add":[[0,')
    again = EditLog(tmp_path, GRAPH)
    assert [r["seq"] for r in again.records] == [1, 2]
    assert (tmp_path / LOG_NAME).read_bytes().endswith(b"]]}\n")  # the torn line is gone
    replayed = plain_state()
    replayed.apply(again.records)
    assert replayed.graph.fingerprint() == s.graph.fingerprint()
    again.append({"seq": 3, "add": [[2, 4]], "remove": []})
    assert again.size == (tmp_path / LOG_NAME).stat().st_size


def test_the_log_refuses_a_second_owner_another_graph_and_damage(tmp_path):
    log = EditLog(tmp_path, GRAPH)
    with pytest.raises(StateError, match="in use by another running service"):
        EditLog(tmp_path, GRAPH)
    log.append({"seq": 1, "add": [[0, 3]], "remove": []})
    log.close()
    with pytest.raises(StateError, match="holds the edits of another graph"):
        EditLog(tmp_path, {**GRAPH, "fingerprint": "bar"})
    lines = (tmp_path / LOG_NAME).read_text().splitlines()
    (tmp_path / LOG_NAME).write_text("\n".join([lines[0], json.dumps({"seq": 2, "add": [], "remove": []})]) + "\n")
    with pytest.raises(StateError, match="line 2 is not edit 1"):
        EditLog(tmp_path, GRAPH)
    (tmp_path / "file").write_text("")
    with pytest.raises(StateError, match="is a file"):
        EditLog(tmp_path / "file", GRAPH)


def test_request_ids_follow_the_loaders_rules():
    """As the edge-list loaders read a file: surrounding spaces trimmed, no empty id, an integer never written
    with a leading zero, integers within the graph's id type."""
    named = named_state()
    assert named.ids.normalise("  b ", "node") == "b" and named.ids.index(" b ") == 1
    assert status_of(named.ids.normalise, "", "'add'[0]") == (400, "'add'[0]: an empty node id; name a node")
    assert status_of(named.ids.normalise, "   ", "node")[0] == 400
    code, message = status_of(named.edit_record, {"add": [["user_3 ", "user_3"]]})  # one node, with itself
    assert code == 400 and "with itself" in message
    ints = GraphState(Graph.from_edges(EDGES, num_nodes=5), np.array([10, 11, 12, 13, 14], dtype=np.uint64), 10)
    assert ints.ids.normalise(" 12 ", "node") == 12 and ints.ids.index("12") == 2
    assert status_of(ints.ids.normalise, "012", "node") == (
        400,
        "node: node id '012' has a leading zero; this graph's ids are integers, written without one",
    )
    assert status_of(ints.ids.normalise, 2**64, "'add'[0]") == (
        400,
        f"'add'[0]: node id {2**64} does not fit this graph's ids (integers from 0 to {2**64 - 1})",
    )
    assert status_of(ints.ids.normalise, -1, "node")[0] == 400
    plain = plain_state()
    assert status_of(plain.edit_record, {"add": [[0, 2**63]]})[0] == 400
    assert status_of(plain.edit_record, {"add": [["", 1]]})[0] == 400


def test_the_log_is_bound_by_its_first_edit_and_never_cuts_a_file_it_refuses(tmp_path):
    """A service that opens a log but never acknowledges an edit leaves the folder free for another graph; a
    file that is no edit log is refused whole, its torn-looking last line kept."""
    EditLog(tmp_path / "a", GRAPH).close()
    assert (tmp_path / "a" / LOG_NAME).read_bytes() == b""
    log = EditLog(tmp_path / "a", {**GRAPH, "fingerprint": "other"})  # not bound: accepted
    log.append({"seq": 1, "add": [[0, 3]], "remove": []})
    log.close()
    assert json.loads((tmp_path / "a" / LOG_NAME).read_text().splitlines()[0])["graph"]["fingerprint"] == "other"
    (tmp_path / "b").mkdir()
    mine = b"name,count\nmine,1\nno newline at the end"
    (tmp_path / "b" / LOG_NAME).write_bytes(mine)
    with pytest.raises(StateError, match="not a PENCIL edit log"):
        EditLog(tmp_path / "b", GRAPH)
    assert (tmp_path / "b" / LOG_NAME).read_bytes() == mine
    lines = (tmp_path / "a" / LOG_NAME).read_bytes()
    (tmp_path / "a" / LOG_NAME).write_bytes(lines + b'{"seq":2,"add"')
    with pytest.raises(StateError, match="holds the edits of another graph"):  # refused before the tail is cut
        EditLog(tmp_path / "a", GRAPH)
    assert (tmp_path / "a" / LOG_NAME).read_bytes() == lines + b'{"seq":2,"add"'
    again = EditLog(tmp_path / "a", {**GRAPH, "fingerprint": "other"})
    assert again.torn == len(b'{"seq":2,"add"') and [r["seq"] for r in again.records] == [1]


def test_the_coalescer_merges_what_queued_while_the_model_worked():
    calls = []

    async def run(items):
        calls.append(list(items))
        await asyncio.sleep(0.01)
        if "bad" in items:
            raise ValueError("bad item")
        return [x * 2 for x in items]

    async def main():
        q = Coalescer(run, max_items=4)
        first = asyncio.create_task(q.submit([1]))
        await asyncio.sleep(0)  # the first call starts alone ...
        rest = [asyncio.create_task(q.submit(b)) for b in ([2], [3, 4], [5], [6, 7, 8])]
        results = await asyncio.gather(first, *rest)  # ... the others wait, then go in as few calls as fit
        with pytest.raises(ValueError, match="bad item"):
            await q.submit(["bad"])
        assert await q.submit([9]) == [18]  # an error does not stop the queue
        return results

    assert asyncio.run(main()) == [[2], [4], [6, 8], [10], [12, 14, 16]]
    assert calls[:3] == [[1], [2, 3, 4, 5], [6, 7, 8]]


def test_a_failed_replicas_traceback_becomes_its_own_line():
    from pipelines.serve.start import deployment_error

    message = (
        "A replica failed to start with exception. Retrying 2 more time(s). Error:\nTraceback (most recent "
        'call last):\n  File "/x/app.py", line 60, in __init__\n    self.log = EditLog(s.state, described)\n'
        "ray.exceptions.RayTaskError(StateError): ray::ServeReplica:pencil-graph:GraphOwner.initialize() "
        '(pid=1, ip=127.0.0.1)\n  File "/x/edit_log.py", line 90, in _parse\n'
        "pipelines.serve.edit_log.StateError: /s/edits.jsonl: line 3 is not a JSON object; the log is damaged"
    )
    assert deployment_error(message) == "/s/edits.jsonl: line 3 is not a JSON object; the log is damaged"
    assert (
        deployment_error("Error:\nTraceback ...\ntorch.OutOfMemoryError: CUDA out of memory")
        == "OutOfMemoryError: CUDA out of memory"
    )
    assert deployment_error("the node died") == "the node died"


# ---------------------------------------------------------------------------- what an edit may hold
SURROGATE = "\ud800"  # what JSON's "\ud800" decodes to: a lone surrogate, with no UTF-8 for it
NAMES = np.array(["a", "b", "c", "d", "e"], dtype=object)


def featured_state() -> GraphState:
    x = np.linspace(-2, 2, 10, dtype=np.float32).reshape(5, 2)  # largest |value| 2: rows within 200 are taken
    return GraphState(Graph.from_edges(EDGES, num_nodes=5, x=x), NAMES, 10)


def test_an_id_that_is_not_valid_unicode_is_refused_before_it_is_logged():
    named = named_state()
    code, message = status_of(named.edit_record, {"add": [["a", SURROGATE]]})
    assert code == 400 and "'add'[0]: node id '\\ud800' is not valid Unicode text" in message, message
    assert status_of(named.edit_record, {"add": [["a", "b"]], "remove": [[" x" + SURROGATE, "a"]]})[0] == 400
    assert status_of(named.ids.index, SURROGATE)[0] == 400  # a read that names it: a 400, not a 500
    assert status_of(plain_state().edit_record, {"add": [[0, SURROGATE]]})[0] == 400
    assert named.ids.normalise("ü-😀", "node") == "ü-😀"  # valid text beyond ASCII stays an id


def test_a_feature_row_must_be_within_the_bound_the_model_trained_on():
    s = featured_state()
    assert s.feature_bound == 200.0
    code, message = status_of(s.edit_record, {"add": [["e", "z"]], "features": {"z": [1e30, 0]}})
    assert code == 400 and "'features'['z']: a value beyond 200 (100 times the largest |value| of the" in message
    assert status_of(s.edit_record, {"add": [["e", "z"]], "features": {"z": [0, -200.5]}})[0] == 400
    code, message = status_of(s.edit_record, {"add": [["e", "z"]], "features": {"z": [1, 1], " z": [2, 2]}})
    assert code == 400 and "'features': node 'z' is given two rows" in message
    assert s.edit_record({"add": [["e", "z"]], "features": {"z": [-200, 199.5]}})["features"] == [["z", [-200, 199.5]]]
    zeros = GraphState(Graph.from_edges(EDGES, num_nodes=5, x=np.zeros((5, 2), np.float32)), None, 10)
    assert zeros.feature_bound == 100.0  # features all 0: the bound of a run whose largest |value| is 1


def test_a_log_poisoned_by_an_earlier_version_replays_without_what_it_refuses(tmp_path):
    """What an earlier version logged and this one refuses (a lone surrogate, a row of 1e30) is dropped at replay,
    with every pair that names a node such a row would have created; the rest replays, alike everywhere."""
    poisoned = [
        {
            "seq": 1,
            "add": [["a", SURROGATE], ["a", "f"]],
            "remove": [],
            "features": [[SURROGATE, [0, 0]], ["f", [1, 1]]],
        },
        {"seq": 2, "add": [["b", "g"]], "remove": [], "features": [["g", [1e30, 0]]]},
        {"seq": 3, "add": [["g", "c"]], "remove": [["a", SURROGATE]]},  # g was a node to that version
        {"seq": 4, "add": [["d", "h"]], "remove": [["a", "b"]], "features": [["h", [2, 2]]]},
    ]
    log = EditLog(tmp_path, GRAPH)
    for record in poisoned:
        log.append(record)
    log.close()
    replayed = featured_state()
    replayed.apply(EditLog(tmp_path, GRAPH).records)  # as JSON gave them back: the surrogate too
    assert replayed.dropped == 6 and replayed.seq == 4
    clean = featured_state()
    for body in (
        {"add": [["a", "f"]], "features": {"f": [1, 1]}},
        {"add": [["d", "h"]], "remove": [["a", "b"]], "features": {"h": [2, 2]}},
    ):
        edit(clean, body)
    assert replayed.graph.fingerprint() == clean.graph.fingerprint() and clean.dropped == 0
    assert replayed.ids.users(np.arange(replayed.graph.num_nodes)) == ["a", "b", "c", "d", "e", "f", "h"]
    assert np.isfinite(replayed.graph.x).all()
    named = named_state()  # a model without features: the surrogate's pairs only
    named.apply([{"seq": 1, "add": [["a", SURROGATE], ["a", "c"]], "remove": []}, {**poisoned[2], "seq": 2, "add": []}])
    assert named.dropped == 2 and named.graph.num_nodes == 5 and named.graph.has_edge(0, 2)


def test_a_state_folder_the_service_cannot_write_is_refused(tmp_path):
    """Caught by a real attempt: a folder of mode 555 (root ignores modes: then a sysfs folder, where nobody may
    create a file), a folder to create under it, and an existing log of mode 444."""
    from pipelines.serve.edit_log import check_state_writable

    check_state_writable(tmp_path / "new" / "state")  # a folder to create: fine, and nothing is left behind
    assert list(tmp_path.iterdir()) == []
    if os.geteuid() == 0:
        if not Path("/sys/kernel").is_dir():
            pytest.skip("root ignores file modes, and there is no /sys/kernel to stand for a read-only folder")
        folders = [Path("/sys/kernel"), Path("/sys/kernel/pencil-state")]
    else:
        (tmp_path / "log").mkdir()
        (tmp_path / "log" / LOG_NAME).write_bytes(b"")
        (tmp_path / "log" / LOG_NAME).chmod(0o444)
        (tmp_path / "ro").mkdir(mode=0o555)
        folders = [tmp_path / "ro", tmp_path / "ro" / "state", tmp_path / "log"]
    for folder in folders:
        with pytest.raises(StateError, match=f"--state {folder}: the service cannot write its edit log there"):
            check_state_writable(folder)
        with pytest.raises(StateError, match="cannot write its edit log there"):
            EditLog(folder, GRAPH)  # `serve run`, which has no check before Ray, gets the same line
