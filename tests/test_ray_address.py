"""RAY_ADDRESS at a port that answers HTTP but is not Ray (the dashboard's 8265 is the realistic mistake): every
command that attaches fails in one line naming RAY_ADDRESS and the fix, instead of hanging in ray.init. The
server is a real http.server on a free port; a command that hung would fail the test by its subprocess timeout.
And where ray.init does wait (a gRPC server that answers the probe's GCS call but is no cluster), SIGTERM ends
the command.
"""

from __future__ import annotations

import http.server
import os
import queue
import signal
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path

import pytest

from tests.conftest import needs_ray

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def http_port():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    server.RequestHandlerClass.log_message = lambda *a: None  # quiet: the test reads the command's stderr
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_port
    server.shutdown()
    server.server_close()


def _pencil(port: int, *argv) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pipelines", *map(str, argv)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line(proc: subprocess.CompletedProcess, port: int) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-3000:]
    assert f"RAY_ADDRESS=127.0.0.1:{port}: an HTTP server answers there" in lines[0], lines[0]
    assert "unset RAY_ADDRESS" in lines[0] and "Traceback" not in proc.stderr
    return lines[0]


def test_probe_tells_an_http_port_from_ray(http_port):
    from preprocess.cluster import RayConnectError, probe_address

    with pytest.raises(RayConnectError, match=f"RAY_ADDRESS=ray://127.0.0.1:{http_port}: an HTTP server"):
        probe_address(f"ray://127.0.0.1:{http_port}")


def test_recommend_and_preprocess_refuse_an_http_port(http_port, tmp_path):
    nodes = tmp_path / "q.txt"
    nodes.write_text("1\n")
    _one_line(
        _pencil(http_port, "recommend", "--checkpoint", tmp_path / "run", "--nodes", nodes, "--out", tmp_path / "r.pq"),
        http_port,
    )
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\n" + "".join(f"{i},{i + 1}\n" for i in range(40)))
    _one_line(_pencil(http_port, "preprocess", "--dataset", edges, "--out", tmp_path / "shards"), http_port)


@pytest.mark.slow
@needs_ray
def test_serve_refuses_an_http_port(http_port, shop_run, tmp_path):
    from pipelines.core.ray_head import free_ports

    proc = _pencil(
        http_port,
        "serve",
        "--checkpoint",
        shop_run["run"],
        "--state",
        tmp_path / "state",
        "--port",
        free_ports(1)[0],
        "--device",
        "cpu",
    )
    _one_line(proc, http_port)


@needs_ray
def test_a_real_ray_head_passes_the_probe():
    from pipelines.core.ray_head import local_head
    from preprocess.cluster import probe_address

    with local_head(num_cpus=1) as (address, _, _):
        probe_address(address)  # its GCS answers the HTTP/2 preface with SETTINGS
        probe_address(f"ray://{address}")


@pytest.fixture
def hanging_gcs_port():
    """A real gRPC server that answers GCS's GetClusterId with an error (so the probe takes it for a GCS) and
    nothing else: ray.init waits on it for minutes."""
    grpc = pytest.importorskip("grpc")

    def cluster_id(request, context):
        context.abort(grpc.StatusCode.INTERNAL, "not a cluster")

    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "ray.rpc.NodeInfoGcsService", {"GetClusterId": grpc.unary_unary_rpc_method_handler(cluster_id)}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    server.stop(0)


def _terminated_while_attaching(port: int, *argv) -> str:
    """Start the command, SIGTERM it once it attaches to RAY_ADDRESS and ray.init waits there (Ray's first
    warning about the GCS); its stderr after it ended."""
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines", *map(str, argv)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr] + [lines.put(None)], daemon=True).start()
    seen, attaching = [], False
    try:
        while (line := lines.get(timeout=300)) is not None:
            seen.append(line)
            attaching = attaching or (f"RAY_ADDRESS=127.0.0.1:{port}:" in line and "cluster" in line)
            if attaching and "GCS" in line:  # Ray's own warning: ray.init is waiting in C++
                proc.send_signal(signal.SIGTERM)
                break
        proc.wait(timeout=60)
    finally:
        proc.kill()
    while (line := lines.get(timeout=30)) is not None:
        seen.append(line)
    assert proc.returncode not in (0, None), "".join(seen)[-3000:]
    return "".join(seen)


@needs_ray
def test_sigterm_ends_preprocess_while_ray_init_waits(hanging_gcs_port, tmp_path):
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\n" + "".join(f"{i},{i + 1}\n" for i in range(40)))
    err = _terminated_while_attaching(hanging_gcs_port, "preprocess", "--dataset", edges, "--out", tmp_path / "s")
    assert f"stopped by SIGTERM while attaching to the Ray cluster at RAY_ADDRESS=127.0.0.1:{hanging_gcs_port}" in err


@pytest.mark.slow
@needs_ray
def test_sigterm_ends_recommend_and_serve_while_ray_init_waits(hanging_gcs_port, shop_run, tmp_path):
    from pipelines.core.ray_head import free_ports

    nodes = tmp_path / "q.txt"
    nodes.write_text("u001\n")
    recommend = ["recommend", "--checkpoint", shop_run["run"], "--nodes", nodes, "--out", tmp_path / "r.parquet"]
    serve = ["serve", "--checkpoint", shop_run["run"], "--state", tmp_path / "state", "--port", free_ports(1)[0]]
    for argv in (recommend, serve):
        err = _terminated_while_attaching(hanging_gcs_port, *argv, "--device", "cpu")
        assert "stopped by SIGTERM while attaching to the Ray cluster" in err, err[-3000:]
