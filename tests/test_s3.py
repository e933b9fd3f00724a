"""Remote storage against a real S3 server (moto's server mode, its own process on 127.0.0.1)."""
import subprocess
import sys

import pytest
from pathlib import Path

from common.storage import FsspecStorage, StorageError, open_storage
from tests.s3_server import s3_server  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]


def test_s3_objects_appear_whole_or_not_at_all(s3_server):
    bucket = s3_server.make_bucket("pencil-objects")
    st = open_storage(f"{bucket}/sets/a")
    assert isinstance(st, FsspecStorage) and st.url == "s3://pencil-objects/sets/a"
    payload = bytes(range(256)) * 4096  # 1 MiB
    with st.writer("train-v000-00000.tar") as f:
        f.write(payload[:1000])
        assert not st.exists("train-v000-00000.tar")
        f.write(payload[1000:])
    assert st.size("train-v000-00000.tar") == len(payload)
    assert st.read("train-v000-00000.tar") == payload
    with st.open_read("train-v000-00000.tar") as f:
        assert f.read(10) == payload[:10]
    with pytest.raises(OSError):
        with st.writer("train-v000-00001.tar") as f:
            f.write(payload)
            raise OSError(28, "No space left on device")
    assert not st.exists("train-v000-00001.tar")
    st.write_atomic("manifest.json", b'{"a": 1}')
    assert open_storage(f"{bucket}/sets/a").read("manifest.json") == b'{"a": 1}'  # another client sees it at once


def test_s3_missing_bucket_is_one_line(s3_server):
    st = open_storage("s3://pencil-no-such-bucket/x")
    assert not st.exists("manifest.json")
    with pytest.raises(StorageError, match=r"s3://pencil-no-such-bucket/x/m.json: the bucket does not exist"):
        st.write_atomic("m.json", b"{}")
    with pytest.raises(StorageError, match="the bucket does not exist"):
        with st.writer("m.json") as f:
            f.write(b"{}")


def test_s3_wrong_endpoint_is_one_line(s3_server):
    # A client whose endpoint points nowhere gets one line naming the URL and what to check.
    code = ("from common.storage import open_storage\n"
            "open_storage('s3://pencil-objects/x').exists('manifest.json')\n")
    env = {**s3_server.client_env(), "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1",
           "AWS_RETRY_MODE": "standard"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "s3://pencil-objects/x/manifest.json" in last and "AWS_ENDPOINT_URL" in last
