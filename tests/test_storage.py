"""common.storage: atomic publication, no temp files after a failure, clear errors for unusable places."""

import errno
import os
import tempfile
from pathlib import Path

import pytest

from common.storage import SPOOL_PREFIX, FsspecStorage, LocalStorage, StorageError, is_remote, join, open_storage


def _names(root):
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_local_writer_publishes_only_on_clean_exit(tmp_path):
    st = LocalStorage(tmp_path / "set")
    with st.writer("a.tar") as f:
        f.write(b"x" * 1000)
        names = _names(tmp_path / "set")  # hidden while being written: .<name>.<pid>.<random>.tmp
        assert len(names) == 1 and names[0].startswith(f".a.tar.{os.getpid()}.") and names[0].endswith(".tmp")
    assert _names(tmp_path / "set") == ["a.tar"] and st.read("a.tar") == b"x" * 1000 and st.size("a.tar") == 1000
    with pytest.raises(RuntimeError, match="boom"):
        with st.writer("b.tar") as f:
            f.write(b"partial")
            raise RuntimeError("boom")
    assert _names(tmp_path / "set") == ["a.tar"]  # the partial file removed itself, nothing published


def test_local_writer_failure_on_write_leaves_nothing(tmp_path):
    st = LocalStorage(tmp_path)

    class FullDisk:
        def write(self, _):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError) as info:
        with st.writer("c.tar") as f:
            f.write(b"some bytes")
            FullDisk().write(b"more")
    assert info.value.errno == errno.ENOSPC
    assert _names(tmp_path) == []


def test_cleanup_tmp_removes_stale_files_only(tmp_path):
    (tmp_path / ".x.tar.123.tmp").write_bytes(b"stale")
    (tmp_path / "x.tar").write_bytes(b"kept")
    assert LocalStorage(tmp_path).cleanup_tmp() == 1
    assert _names(tmp_path) == ["x.tar"]


def test_out_that_is_a_file_is_a_storage_error(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    for root in (tmp_path / "file", tmp_path / "file" / "sub" / "set"):
        with pytest.raises(StorageError, match="file"):
            LocalStorage(root).write_atomic("m.json", b"{}")
    assert LocalStorage(tmp_path / "file" / "sub").size("m.json") is None


def test_open_storage_dispatch():
    assert isinstance(open_storage("/tmp/x"), LocalStorage)
    assert isinstance(open_storage("file:///tmp/x"), LocalStorage) and open_storage("file:///tmp/x").url == "/tmp/x"
    assert isinstance(open_storage("memory://bucket/p"), FsspecStorage)
    assert is_remote("s3://b/p") and not is_remote("file:///x") and not is_remote("rel/path")
    assert join("s3://b/p/", "ds", "key") == "s3://b/p/ds/key" and join("out", "a") == "out/a"


def test_unknown_protocol_is_one_line():
    with pytest.raises(StorageError, match="nosuchproto://x: no file system for this URL|not a usable"):
        open_storage("nosuchproto://x")


def test_fsspec_writer_publishes_whole_objects(tmp_path):
    st = open_storage("memory://pencil-test-bucket/set")
    with st.writer("a.tar") as f:
        f.write(b"abc" * 100)
        assert not st.exists("a.tar")  # nothing visible before the upload at exit
    assert st.read("a.tar") == b"abc" * 100 and st.size("a.tar") == 300
    with st.open_read("a.tar") as f:
        assert f.read(3) == b"abc"
    with pytest.raises(ValueError):
        with st.writer("b.tar") as f:
            f.write(b"half")
            raise ValueError("worker died")
    assert not st.exists("b.tar") and st.size("b.tar") is None
    spools = [p for p in Path(tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}{os.getpid()}-*")]
    assert spools == []  # the local spool of the failed write is gone too
    st.write_atomic("m.json", b"{}")
    local = st.local_path("m.json", tmp_path / "cache")
    assert local.read_bytes() == b"{}" and local.parent == tmp_path / "cache"
    assert st.local_path("m.json", tmp_path / "cache") == local  # cached: same file, not fetched again
    st.remove("m.json")
    st.remove("m.json")  # removing a missing object is not an error
    assert not st.exists("m.json")
