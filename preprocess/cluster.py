"""Start an embedded Ray, or attach to the cluster RAY_ADDRESS names, quietly and with bounded waits.

Embedded (RAY_ADDRESS unset): Ray >= 2.5x turns token authentication on for a new local cluster and
warns about it on every start, although no other cluster is involved. Ray's default (token
auth on) is kept; only that start-up notice of Ray's token-setup logger is dropped. Setting
RAY_AUTH_MODE instead would not do: Ray reads it when it is imported, and callers import it earlier.

Attached (RAY_ADDRESS set): `ray.init` retries a dead address for minutes, printing a warning per try
(once still retrying after 400 s and 33 lines). The address is probed with one TCP connect first
(PROBE_SECONDS), so a dead or mistyped one fails in one line, within seconds.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

log = logging.getLogger(__name__)

PROBE_SECONDS = 5.0
TOKEN_SETUP_LOGGER = "ray._private.authentication.authentication_token_setup"


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
    """Fail fast, in one line, when nothing listens at RAY_ADDRESS."""
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout):
            pass
    except OSError as err:
        reason = "timed out" if isinstance(err, socket.timeout) else (err.strerror or type(err).__name__).lower()
        raise RayConnectError(
            f"RAY_ADDRESS={address}: no Ray cluster answers there ({reason}); start one "
            "(`ray start --head`) or fix the address, or unset RAY_ADDRESS to use an embedded Ray"
        ) from None


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
    return True
