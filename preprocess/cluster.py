"""Start an embedded Ray, or attach to the cluster RAY_ADDRESS names, quietly and with bounded waits.

Embedded (RAY_ADDRESS unset): Ray >= 2.5x turns token authentication on for a new local cluster and
warns about it on every start, although no other cluster is involved. Ray's default (token
auth on) is kept; only that start-up notice of Ray's token-setup logger is dropped. Setting
RAY_AUTH_MODE instead would not do: Ray reads it when it is imported, and callers import it earlier.

Attached (RAY_ADDRESS set): `ray.init` retries a dead address for minutes, printing a warning per try
(once still retrying after 400 s and 33 lines), and one that answers but is not Ray (the dashboard's HTTP port
8265) hangs it for good, deaf to SIGTERM. So the address is probed first, each step bounded by PROBE_SECONDS: a
TCP connect, then the first step of gRPC's handshake, which Ray's GCS and its client server (ray://) both speak:
an HTTP/2 preface, answered by a SETTINGS frame; for a GCS address (not ray://) one call of the GCS's, which
a gRPC server that is not Ray answers UNIMPLEMENTED. A dead, mistyped or non-Ray address fails in one line,
within seconds. With RAY_USE_TLS set the handshake is TLS's first, so only the connect is checked. While
ray.init then waits on the cluster (in C++, where no Python signal handler runs), SIGTERM and Ctrl-C still end
the command at once (`signals_end_attach`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from common.parent_death import reap_on_death

log = logging.getLogger(__name__)

PROBE_SECONDS = 5.0
# the client preface of HTTP/2 (RFC 9113 3.4) and an empty SETTINGS frame: a gRPC server answers with its SETTINGS
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
H2_SETTINGS = 4  # the frame type in byte 3 of a frame's 9-byte header
FIX = "use the address `ray start --head` printed (GCS, host:6379) or ray://host:10001, or unset RAY_ADDRESS"
TOKEN_SETUP_LOGGER = "ray._private.authentication.authentication_token_setup"
_watchdog = None  # the embedded Ray's (reap_with_driver): one at a time


class _DropTokenNotice(logging.Filter):
    """Drops Ray's "Token authentication is enabled/disabled for this Ray cluster" start-up notice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "for this Ray cluster" not in record.getMessage()


class RayConnectError(RuntimeError):
    """RAY_ADDRESS names no reachable cluster; the message names the address and the fix."""


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a RAY_ADDRESS, or None for the forms Ray resolves itself ("auto", "local")."""
    text = address.strip()
    for scheme in ("ray://", "http://", "https://"):
        if text.startswith(scheme):
            text = text[len(scheme) :]
    if text in ("auto", "local", ""):
        return None
    host, sep, port = text.rstrip("/").rpartition(":")
    if not sep or not port.isdigit():
        raise RayConnectError(
            f"RAY_ADDRESS={address}: expected host:port (e.g. 10.0.0.5:6379) or ray://host:port; "
            "unset RAY_ADDRESS to use an embedded Ray"
        )
    return host.strip("[]") or "127.0.0.1", int(port)


def probe_address(address: str, timeout: float = PROBE_SECONDS) -> None:
    """Fail fast, in one line, when nothing listens at RAY_ADDRESS or what listens there is not Ray."""
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout) as sock:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("0", "false", ""):
                answer = _h2_answer(sock)
                if answer is None and not address.strip().startswith("ray://"):
                    answer = _gcs_answer(target, timeout)
                if answer is not None:
                    raise RayConnectError(f"RAY_ADDRESS={address}: {answer}, not Ray's gRPC; {FIX}")
    except OSError as err:
        reason = "timed out" if isinstance(err, socket.timeout) else (err.strerror or type(err).__name__).lower()
        raise RayConnectError(
            f"RAY_ADDRESS={address}: no Ray cluster answers there ({reason}); start one "
            "(`ray start --head`) or fix the address, or unset RAY_ADDRESS to use an embedded Ray"
        ) from None


def _h2_answer(sock: socket.socket) -> str | None:
    """Send the HTTP/2 preface on `sock` (its timeout bounds each read); None when a SETTINGS frame comes back,
    else what came back instead, in words."""
    sock.sendall(H2_PREFACE)
    head = b""
    try:
        while len(head) < 9:
            chunk = sock.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    except socket.timeout:
        return f"the server there did not answer an HTTP/2 handshake in {sock.gettimeout():g} s ({len(head)} bytes)"
    except ConnectionResetError:
        return "the server there reset the connection at an HTTP/2 handshake"
    if len(head) == 9 and head[3] == H2_SETTINGS:
        return None
    if head.startswith((b"HTTP/", b"<")):  # a status line, or the HTML error page of an HTTP/0.9 reply
        return "an HTTP server answers there (the dashboard's port, 8265?)"
    return f"the server there answered an HTTP/2 handshake with {head[:9]!r}"


def _gcs_answer(target: tuple[str, int], timeout: float) -> str | None:
    """One call of Ray's GCS (GetClusterId, no payload): None when a GCS answers it, in any way but
    UNIMPLEMENTED (a cluster with token auth answers UNAUTHENTICATED), else what answered instead. None where
    grpc is missing: the handshake is all there is then."""
    try:
        import grpc
    except ImportError:
        return None
    with grpc.insecure_channel(f"{target[0]}:{target[1]}") as channel:
        try:
            channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId")(b"", timeout=timeout)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                return "a gRPC server that is not Ray's GCS answers there"
            if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return f"the gRPC server there did not answer Ray's GCS call ({err.code().name.lower()})"
    return None


@contextlib.contextmanager
def signals_end_attach(address: str):
    """While ray.init attaches to `address`: it waits in C++ with the GIL released, so a Python signal handler
    would run only once it returns (minutes, or never). Python's C-level handler still writes each signal to
    the wakeup fd; a thread reading it ends the process on SIGTERM or SIGINT, with one line."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    default = [sig for sig, handler in saved.items() if handler in (signal.SIG_DFL, None)]  # SIG_IGN stays
    for sig in default:  # only with a Python handler does the C handler write the wakeup fd
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else _exit_on_term)
    old = signal.set_wakeup_fd(write)

    def watch():
        while got := os.read(read, 1):
            if got[0] in (signal.SIGTERM, signal.SIGINT):
                name = signal.Signals(got[0]).name
                sys.stderr.write(f"stopped by {name} while attaching to the Ray cluster at RAY_ADDRESS={address}\n")
                sys.stderr.flush()
                os._exit(128 + got[0])
        os.close(read)

    threading.Thread(target=watch, name="attach-signals", daemon=True).start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(old)
        for sig in default:
            if signal.getsignal(sig) in (_exit_on_term, signal.default_int_handler):  # not one ray.init set
                signal.signal(sig, signal.SIG_DFL)
        os.close(write)  # the thread reads EOF, closes its end and ends


def _exit_on_term(signum, frame):
    raise SystemExit(128 + signum)


def init_ray(num_cpus: int | None = None) -> bool:
    """Start (embedded) or attach to Ray (RAY_ADDRESS set) unless this process already did.

    Returns True when this call started it, i.e. the caller should ray.shutdown() when done."""
    import ray

    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    if address:
        probe_address(address)
        log.info(
            "RAY_ADDRESS=%s: attaching to the cluster%s",
            address,
            "; --num-cpus is ignored" if num_cpus is not None else "",
        )
        try:
            with signals_end_attach(address):
                ray.init(log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise RayConnectError(
                f"RAY_ADDRESS={address}: could not attach ({' '.join(str(err).split())[:300]}); "
                "check the address and the cluster, or unset RAY_ADDRESS"
            ) from None
        return True
    quiet = logging.getLogger(TOKEN_SETUP_LOGGER)
    if not any(isinstance(f, _DropTokenNotice) for f in quiet.filters):
        quiet.addFilter(_DropTokenNotice())
    # Workers import preprocess/ and common/ from the repository, wherever the driver was started.
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=True,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
        logging_level=logging.INFO if log.isEnabledFor(logging.INFO) else logging.WARNING,
    )  # quiet under -q
    reap_with_driver(ray)
    return True


def reap_with_driver(ray) -> None:
    """Ray's processes go when this driver dies, even by SIGKILL (common.parent_death.reap_on_death), instead of
    its raylet's agents lingering for a minute or two. From the main thread only: the kernel's parent-death
    signal follows the thread that started the watchdog."""
    global _watchdog
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        session = ray._private.worker._global_node.get_session_dir_path()
    except AttributeError:  # another Ray's internals: its own cleanup is all there is
        return
    if _watchdog is not None and _watchdog.poll() is None:  # an earlier Ray's, shut down since: it reaps its rest
        _watchdog.terminate()
        _watchdog.wait()
    _watchdog = reap_on_death(session)
