"""A real S3-compatible server for tests: moto's server mode in its own process on 127.0.0.1.

Not an in-process mock: clients (this process, subprocess CLIs, Ray workers) talk HTTP to it and find
it the standard way, through AWS_ENDPOINT_URL and the AWS_* credential variables."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    def __init__(self):
        pytest.importorskip("moto.server", reason="moto[server] is a dev dependency")
        pytest.importorskip("s3fs")
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1)
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"moto server did not start on {self.endpoint}")
                time.sleep(0.1)
        self.env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def client_env(self) -> dict:
        """os.environ for a subprocess that talks to this server."""
        return {**os.environ, **self.env}

    def make_bucket(self, name: str) -> str:
        import s3fs

        fs = s3fs.S3FileSystem(key="testing", secret="testing", endpoint_url=self.endpoint, skip_instance_cache=True)
        fs.mkdir(name)
        return f"s3://{name}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="session")
def s3_server():
    server = S3Server()
    saved = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)  # this process (and Ray workers it starts) find the server like any client
    try:
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
