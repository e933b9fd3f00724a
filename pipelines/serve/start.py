"""A service's start, so that one that cannot start says why, in one line, within seconds.

Everything that can be checked before Ray starts is checked first, each in one line naming the flag or the
file (`precheck`): the port, RAY_ADDRESS (probed as `pencil recommend` does: Ray itself retries a dead address
for minutes), the state folder (that the service can write there: tried, not read off a mode) and its edit log
(line by line, against the served graph, read without changing it; what its replay would drop is said), the
run (its shard set, its edge list where it is now) and the graph to serve (with the run's node features when its
model reads them: a snapshot with new nodes is refused). Then the applications are deployed without Serve's
blocking wait (`deploy`): that wait retries a failing constructor for over a minute and then
reports only "Failed to update the deployments"; here the first failed replica's own exception is the
command's error.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from pathlib import Path

from common.cli import PROJECT_PACKAGES
from common.outputs import check_output_folder
from pipelines.serve.edit_log import LOG_NAME, check_state_folder, check_state_writable, inspect_log
from pipelines.serve.settings import Settings

log = logging.getLogger("pipelines.serve")
POLL_S = 0.2
# the last "pkg.module.SomeError: message" line of a traceback (a RayTaskError(...) wrapper line does not match)
_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")


class ServeStartError(RuntimeError):
    """A deployment that failed to start; the message is its own exception's."""


def check_port(host: str, port: int) -> None:
    if not 1 <= port <= 65535:
        raise ValueError(f"--port {port}: must be from 1 to 65535")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server: old connections do not count
        try:
            s.bind((host, port))
        except OSError as err:
            raise ValueError(
                f"--port {port}: cannot listen on {host}:{port} ({err.strerror}); choose another --port or --host"
            ) from None


def check_state_free(folder: str) -> None:
    """Refuse at once a state folder whose log another running service holds (the owner would refuse it too,
    after Serve's retries)."""
    import fcntl

    path = Path(folder) / LOG_NAME
    if not path.is_file():
        return
    with open(path, "rb") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"--state {folder}: its edit log is in use by another running service; stop that one "
                "or pass another --state"
            ) from None


def served_graph(s: Settings) -> dict:
    """The graph the service would start from, as its edit log's header describes it."""
    return served_state(s)[1]


def served_state(s: Settings):
    """(GraphState, its description) the service would start from: the run loaded and checked as the graph owner
    and the replicas load it (a moved edge list through --dataset, an edited one refused)."""
    from pipelines.core.runs import load_checkpoint, run_dataset, run_manifest
    from pipelines.serve.state import serving_state

    manifest = run_manifest(load_checkpoint(Path(s.checkpoint)), s.checkpoint, s.shards or None)
    return serving_state(run_dataset(manifest, s.dataset), s.graph, s.max_new_nodes, s.features)


def dropped_line(path, dropped: int) -> str:
    """The warning of a log whose replay dropped entries an earlier version accepted (pipelines/serve/state.py)."""
    return (
        f"edit log {path}: {dropped} entr{'y' if dropped == 1 else 'ies'} dropped at replay (a pair or a feature "
        "row that an earlier version accepted and this one refuses: an id that is not valid Unicode text, a row "
        "not finite or out of bound, or a pair naming a node such a row would have created); the rest replays"
    )


def precheck(s: Settings, host: str, port: int) -> None:
    """Every check that needs no Ray, cheapest first; a ValueError (or the run's own error) in one line."""
    check_port(host, port)
    if os.environ.get("RAY_ADDRESS"):
        from preprocess.cluster import probe_address

        probe_address(os.environ["RAY_ADDRESS"])
    check_state_folder(s.state)
    check_output_folder(s.state, "--state")  # the log never goes into a run folder or a shard set
    check_state_free(s.state)
    check_state_writable(s.state)
    state, graph = served_state(s)
    records, torn = inspect_log(s.state, graph)
    if records or torn:
        log.info(
            "edit log %s: replaying %d edit(s)%s",
            Path(s.state) / LOG_NAME,
            len(records),
            f"; its torn last line ({torn} bytes, an edit never acknowledged) is dropped" if torn else "",
        )
    state.apply(records)  # as the graph owner will: what it would drop is said here, before Ray
    if state.dropped:
        log.warning("%s", dropped_line(Path(s.state) / LOG_NAME, state.dropped))


def deploy(app, name: str, route_prefix: str | None) -> None:
    """serve.run without its blocking wait, then the application's status until it runs; the first replica that
    fails to start ends the wait with its own exception (ServeStartError)."""
    from ray import serve
    from ray.serve.api import _run  # serve.run is this with a wait that reports no cause

    _run(app, _blocking=False, name=name, route_prefix=route_prefix)
    while True:
        status = serve.status().applications.get(name)
        if status is not None:
            if status.status == "RUNNING":
                return
            failed = [d.message for d in status.deployments.values() if "failed to start" in (d.message or "")]
            if failed or status.status == "DEPLOY_FAILED":
                cause = deployment_error(failed[0] if failed else status.message)
                raise ServeStartError(f"{name} could not start: {cause}")
        time.sleep(POLL_S)


def deployment_error(message: str) -> str:
    """The exception at the end of a failed replica's traceback, as one line: a project error's own message,
    anything else as `Type: message`."""
    found = [m for line in (message or "").splitlines() if (m := _ERROR_LINE.match(line))]
    if not found:
        return " ".join((message or "no message").split())[:300]
    kind, text = found[-1].groups()
    return text.strip() if kind.split(".")[0] in PROJECT_PACKAGES else f"{kind.split('.')[-1]}: {text.strip()}"
