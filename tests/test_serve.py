"""`pencil serve` for real: the command on 127.0.0.1 and a free port, driven over HTTP. /score equals `pencil score`,
/recommend equals `pencil recommend`, an edge added through /edges leaves the recommendations, every documented
error is its status and one line, and kill -9 takes the service and its Ray down while a restart keeps every
acknowledged edge; on a cluster, `serve deploy` rolls a new checkpoint out without dropping a request. Slow: about
3 min per test on 2 shared cores."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.serve import request, service
from pipelines.core.ray_head import free_ports, session_members
from tests.conftest import tiny_citeseer_run

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "test-token-3f9a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, shard_cache):
    return tiny_citeseer_run(shard_cache, tmp_path_factory.mktemp("serve") / "run")


def call(port, method, path, body=None, headers=None) -> tuple[int, dict]:
    status, text = request(port, method, path, body, headers)
    assert "\n" not in text.strip(), text  # one line
    return status, json.loads(text)


def cli(*args) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def children_of(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def recommended(port, node) -> list:
    status, body = call(port, "GET", f"/recommend/{node}")
    assert status == 200, body
    return body["recommendations"]


def test_the_service_over_http(run_dir, tmp_path):
    from common.datasets import DatasetSpec, load_dataset
    from common.snapshot import whole_graph

    graph = whole_graph(load_dataset(DatasetSpec("citeseer")))  # what it serves by default: every split's edges
    port, state = free_ports(1)[0], tmp_path / "state"
    env = {"PENCIL_SERVE_TOKEN": TOKEN}
    flags = ("--max-pairs", "50")
    with service(run_dir, state, port, *flags, env=env, log_path=tmp_path / "serve.log") as proc:
        # /score equals pencil score on the same graph
        rng = np.random.default_rng(0)
        pairs = rng.integers(0, graph.num_nodes, (40, 2))
        pairs = pairs[pairs[:, 0] != pairs[:, 1]]
        (tmp_path / "pairs.csv").write_text("src,dst\n" + "".join(f"{u},{v}\n" for u, v in pairs))
        cli(
            "score",
            "--checkpoint",
            str(run_dir),
            "--pairs",
            str(tmp_path / "pairs.csv"),
            "--out",
            str(tmp_path / "scores.parquet"),
            "--graph",
            "all",
        )
        want = pq.read_table(tmp_path / "scores.parquet").to_pydict()
        status, body = call(port, "POST", "/score", {"pairs": pairs.tolist()})
        assert status == 200, body
        got = body["scores"]
        assert [[r["src"], r["dst"]] for r in got] == pairs.tolist()
        np.testing.assert_allclose([r["logit"] for r in got], want["logit"], atol=1e-5)
        np.testing.assert_allclose([r["score"] for r in got], want["score"], atol=1e-6)

        # /recommend equals pencil recommend for the same node, with the same defaults
        nodes = np.flatnonzero(graph.degree >= 3)[:3].tolist()
        (tmp_path / "nodes.txt").write_text("".join(f"{n}\n" for n in nodes))
        cli(
            "recommend",
            "--checkpoint",
            str(run_dir),
            "--nodes",
            str(tmp_path / "nodes.txt"),
            "--out",
            str(tmp_path / "recs.parquet"),
            "--no-progress",
        )
        recs = pq.read_table(tmp_path / "recs.parquet").to_pandas()
        for node in nodes:
            rows = recs[recs.node == node]
            got = recommended(port, node)
            assert [r["candidate"] for r in got] == rows.candidate.tolist()
            assert [r["rank"] for r in got] == rows["rank"].tolist()
            np.testing.assert_allclose([r["score"] for r in got], rows.score, rtol=1e-6)
            assert not any(graph.has_edge(node, r["candidate"]) or r["candidate"] == node for r in got)

        # an edge added through /edges: the new neighbour is no longer recommended, and /neighbors has it
        node = nodes[0]
        top = recommended(port, node)[0]["candidate"]
        status, body = call(port, "POST", "/edges", {"add": [[node, top]]}, AUTH)
        assert status == 200 and body["seq"] == 1, body
        assert top not in [r["candidate"] for r in recommended(port, node)]
        assert top in call(port, "GET", f"/neighbors/{node}")[1]["neighbors"]

        # every documented error: its status and its line
        errors = [
            ("GET", "/recommend/99999", None, None, 404, "unknown node 99999"),
            ("GET", "/neighbors/99999", None, None, 404, "unknown node 99999"),
            ("POST", "/score", b'{"pairs": [[1, 2]', None, 400, "malformed JSON body"),
            ("POST", "/score", {"pair": [[1, 2]]}, None, 400, "unknown field 'pair'"),
            ("GET", f"/recommend/{node}?k=0", None, None, 400, "k=0: out of range"),
            ("GET", f"/recommend/{node}?pool=100000", None, None, 400, "pool=100000: out of range"),
            (
                "POST",
                "/score",
                {"pairs": [[1, 2]] * 51},
                None,
                413,
                "too many pairs: 51 in one request; the limit is 50",
            ),
            ("POST", "/edges", {"add": [[1, 2]]}, None, 401, "missing bearer token"),
            ("POST", "/edges", {"add": [[1, 2]]}, {"Authorization": "Bearer nope"}, 401, "wrong token"),
            ("GET", f"/recommend/{node}?k=3&k=4", None, None, 400, "query parameter 'k' given 2 times; give it once"),
            ("POST", "/edges", {"add": [["", 1]]}, AUTH, 400, "'add'[0]: an empty node id"),
            ("POST", "/edges", {"add": [[node, 2**64]]}, AUTH, 400, f"node id {2**64} does not fit this graph's ids"),
            ("POST", "/edges", {"add": [[node, "0012"]]}, AUTH, 400, "node id '0012' has a leading zero"),
        ]
        for method, path, body, headers, want_status, line in errors:
            status, answer = call(port, method, path, body, headers)
            assert status == want_status and line in answer["error"] and set(answer) == {"error"}, (path, answer)
        assert call(port, "GET", f"/neighbors/%20{node}%20")[1]["node"] == node  # spaces trimmed, as the loaders do

        # kill -9 while edits stream in: the service and its Ray go down, every acknowledged edit survives
        heads = children_of(proc.pid)
        acked, stop = [], threading.Event()

        def edit_forever():
            for i in range(10_000):
                if stop.is_set():
                    return
                edge = [node, 3400 + i % 50] if i % 2 else [nodes[1], 3500 + i % 50]
                try:
                    status, _ = request(port, "POST", "/edges", {"add": [edge]}, AUTH, timeout=30)
                except OSError:
                    return
                if status == 200:
                    acked.append(edge)

        writer = threading.Thread(target=edit_forever)
        writer.start()
        while len(acked) < 5:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        writer.join(timeout=60)
        stop.set()
        deadline = time.time() + 60
        while any(session_members(h) for h in heads) and time.time() < deadline:
            time.sleep(0.5)
        assert heads and not any(session_members(h) for h in heads), "the embedded Ray outlived the killed command"
        with pytest.raises(OSError):
            request(port, "GET", "/health", timeout=5)

    with service(run_dir, state, port, *flags, env=env, log_path=tmp_path / "serve2.log"):
        status, health = call(port, "GET", "/health")
        assert status == 200 and health["seq"] >= 1 + len(acked), health
        neighbours = {u: set(call(port, "GET", f"/neighbors/{u}")[1]["neighbors"]) for u in (node, nodes[1])}
        assert top in neighbours[node]
        for u, v in acked:
            assert v in neighbours[u], (u, v)
        assert top not in [r["candidate"] for r in recommended(port, node)]


def test_a_new_checkpoint_rolls_out_without_dropping_requests(run_dir, ray_head, tmp_path):
    """`serve deploy` of the configs `pencil serve --write-config` writes, on a cluster: the second one names
    another checkpoint; Serve starts its replica before the old one drains, and the graph owner stays."""
    port = free_ports(1)[0]
    (tmp_path / "token").write_text(TOKEN)
    for name, ckpt in (("old", run_dir / "best.pt"), ("new", run_dir / "last.pt")):
        cli(
            "serve",
            "--checkpoint",
            str(ckpt),
            "--state",
            str(tmp_path / "state"),
            "--port",
            str(port),
            "--token-file",
            str(tmp_path / "token"),
            "--write-config",
            str(tmp_path / f"{name}.yaml"),
        )
    serve_cmd = str(Path(ray_head.cmd).with_name("serve")) if os.sep in ray_head.cmd else "serve"

    def deploy(name):
        proc = subprocess.run(
            [serve_cmd, "deploy", str(tmp_path / f"{name}.yaml"), "--address", ray_head.address],
            cwd=ROOT,
            env=ray_head.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]

    def health() -> dict:
        deadline = time.time() + 600
        while time.time() < deadline:
            try:
                status, text = request(port, "GET", "/health", timeout=10)
                if status == 200:
                    return json.loads(text)
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError("the service did not come up")

    deploy("old")
    before = health()
    assert call(port, "POST", "/edges", {"add": [[1, 2]]}, AUTH)[0] == 200
    statuses, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            try:
                statuses.append(request(port, "GET", "/recommend/10?k=5", timeout=120)[0])
            except OSError as err:
                statuses.append(repr(err))

    reader = threading.Thread(target=load)
    reader.start()
    try:
        deploy("new")
        deadline = time.time() + 600
        while health()["checkpoint"] == before["checkpoint"] and time.time() < deadline:
            time.sleep(1)
        time.sleep(3)  # requests on the new replica too
    finally:
        stop.set()
        reader.join()
    after = health()
    assert after["checkpoint"] != before["checkpoint"] and after["seq"] == 1
    assert statuses and set(statuses) == {200}, sorted(set(map(str, statuses)))


def test_a_deployment_that_cannot_start_says_its_own_error(tmp_path):
    """A cause only a deployment meets (its shard set gone after the command's checks): the command's start
    (run_service, in a process of its own as `pencil serve` is) ends at the first failed replica with that
    replica's own one-line error, not Serve's generic one after its retries; its Ray goes down with it."""
    script = textwrap.dedent("""
        import sys, time
        from pipelines.serve.command import run_service
        from pipelines.serve.settings import Settings
        s = Settings.from_dict({"checkpoint": "unused.pt", "state": sys.argv[1], "shards": sys.argv[2],
                                "device": "cpu"})
        try:
            run_service(s, "127.0.0.1", int(sys.argv[3]), 1, "pencil serve")
        except Exception as err:
            print(f"{type(err).__name__}|{err}", flush=True)
    """)
    gone = tmp_path / "gone"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "state"), str(gone), str(free_ports(1)[0])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    kind, _, message = proc.stdout.strip().splitlines()[-1].partition("|")
    assert kind == "ServeStartError", proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message.startswith(f"pencil-graph could not start: {gone}: no manifest; the shard set is incomplete"), (
        message
    )
    assert "Failed to update the deployments" not in message
    assert not (tmp_path / "state" / "edits.jsonl").exists()
