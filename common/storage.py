"""Where a shard set lives: one small interface over a local folder or an fsspec object store (s3://).

Writers never expose half an object:
- local: a write goes to a hidden temporary name in the same folder and is renamed into place; a failed
  write removes its own temporary file (a full disk must not stay full);
- object store (no rename): a write spools to a local temporary file and is published by one complete
  upload on clean exit (a single PUT, or a multipart upload that becomes visible only when completed),
  so a failure leaves nothing under the final name.
Readers get a streaming binary file. Everything above this module (the shard writer, the Ray tasks,
the trainer's loader) names objects by their file name inside the set and never builds paths itself.
Endpoint and credentials of a remote store come the standard way (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, ~/.aws/...), never from this repository.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

from common.atomic import TMP_SUFFIX, atomic_file


class StorageError(RuntimeError):
    """A storage location that cannot be used; the message names it and the fix."""


SPOOL_PREFIX = "pencil-spool-"  # local spool files of remote writes (in the system temp folder)


class LocalStorage:
    """A folder on a local (or network-mounted) file system."""

    remote = False

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @property
    def url(self) -> str:
        return str(self.root)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def local_path(self, name: str, cache_dir: str | os.PathLike | None = None) -> Path:
        """A local file holding `name` (here: the file itself; no copy)."""
        return self.root / name

    def exists(self, name: str) -> bool:
        return (self.root / name).exists()

    def size(self, name: str) -> int | None:
        try:
            return (self.root / name).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def open_read(self, name: str) -> BinaryIO:
        return open(self.root / name, "rb")

    def names(self) -> list[str]:
        """Names of the files in the folder (not temporary ones), sorted."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_file() and not p.name.startswith("."))

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def check_writable(self) -> None:
        """Fail before any work if this folder cannot be created or written (a file in the way, no permission)."""
        for p in (self.root, *self.root.parents):
            if p.exists():
                if not p.is_dir():
                    where = "is a file" if p == self.root else f"is below {p}, which is a file"
                    raise StorageError(f"{self.root}: {where}, not a directory; choose another output folder")
                if not os.access(p, os.W_OK | os.X_OK):
                    raise StorageError(
                        f"{self.root}: permission denied (cannot write in {p}); choose a writable output folder"
                    )
                return

    def _mkdir(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise StorageError(f"{self.root}: exists and is not a directory; choose another output folder")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            # A parent is a regular file (`--out` pointed at a file).
            raise StorageError(
                f"{self.root}: a parent of this folder is a file, not a directory; choose another output folder"
            ) from None
        except PermissionError:
            raise StorageError(
                f"{self.root}: permission denied creating this folder; choose a writable output folder"
            ) from None

    @contextlib.contextmanager
    def writer(self, name: str) -> Iterator[BinaryIO]:
        """A file to stream `name` into; it appears under its name only if the block exits cleanly."""
        self._mkdir()
        with atomic_file(self.root / name, "wb") as f:
            yield f

    def write_atomic(self, name: str, data: bytes) -> None:
        """Write under a temporary name, fsync, then rename: readers never see half a file."""
        with self.writer(name) as f:
            f.write(data)

    def remove(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)

    def cleanup_tmp(self) -> int:
        """Remove temporary files that killed writers left behind; returns how many."""
        if not self.root.is_dir():
            return 0
        stale = list(self.root.glob(f".*{TMP_SUFFIX}"))
        for tmp in stale:
            tmp.unlink(missing_ok=True)
        return len(stale)


class FsspecStorage:
    """A prefix in an fsspec file system (s3://bucket/prefix, gs://, memory://, ...).

    Listing caches are off: Ray workers write objects that the driver must see at once."""

    remote = True

    def __init__(self, url: str, **options):
        try:
            import fsspec

            self.fs, root = fsspec.core.url_to_fs(url, use_listings_cache=False, skip_instance_cache=True, **options)
        except ImportError as err:  # e.g. s3:// without s3fs installed
            raise StorageError(
                f"{url}: no file system for this URL ({err}); install the pinned extras "
                "(pip install -c constraints.txt -e .)"
            ) from None
        except ValueError as err:
            raise StorageError(f"{url}: not a usable storage URL ({err})") from None
        self.root = root.rstrip("/")
        self._url = url.rstrip("/")

    @property
    def url(self) -> str:
        return self._url

    def path(self, name: str) -> str:
        return f"{self._url}/{name}"

    def _key(self, name: str) -> str:
        return f"{self.root}/{name}"

    @contextlib.contextmanager
    def _errors(self, name: str | None = None) -> Iterator[None]:
        """Turn a store's errors (no credentials, no endpoint, access denied) into one StorageError line;
        FileNotFoundError passes through so callers can treat 'missing' as they do locally."""
        try:
            yield
        except FileNotFoundError:
            raise
        except StorageError:
            raise
        except Exception as err:  # botocore/aiohttp errors do not share a base class with OSError
            where = self.path(name) if name else self._url
            raise StorageError(
                f"{where}: {type(err).__name__}: {_one_line(err)}; check the URL, the bucket, "
                "and the AWS_* credentials/AWS_ENDPOINT_URL"
            ) from None

    @contextlib.contextmanager
    def _missing_bucket(self, name: str) -> Iterator[None]:
        try:
            yield
        except FileNotFoundError:  # a write cannot miss its object: the bucket is what is missing
            raise StorageError(
                f"{self.path(name)}: the bucket does not exist; create it first (buckets are never created implicitly)"
            ) from None

    def check_writable(self) -> None:
        """Fail before any work if the bucket (first path component) is missing or unreachable."""
        bucket = self.root.split("/", 1)[0]
        try:
            with self._errors():
                self.fs.info(bucket)  # not exists(): that answers False when the endpoint is unreachable
            found = True
        except FileNotFoundError:
            found = False
        if not found:
            raise StorageError(
                f"{self._url}: bucket '{bucket}' does not exist; create it first (buckets are never created implicitly)"
            )

    def exists(self, name: str) -> bool:
        with self._errors(name):
            return bool(self.fs.exists(self._key(name)))

    def size(self, name: str) -> int | None:
        try:
            with self._errors(name):
                return int(self.fs.size(self._key(name)))
        except FileNotFoundError:
            return None

    def open_read(self, name: str) -> BinaryIO:
        with self._errors(name):
            return self.fs.open(self._key(name), "rb")

    def names(self) -> list[str]:
        """Names of the objects directly under the prefix, sorted."""
        try:
            with self._errors():
                entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        return sorted(e["name"].rsplit("/", 1)[-1] for e in entries if e.get("type") == "file")

    def read(self, name: str) -> bytes:
        with self._errors(name):
            return self.fs.cat_file(self._key(name))

    def local_path(self, name: str, cache_dir: str | os.PathLike | None = None) -> Path:
        """A local copy of `name` (for arrays that want mmap): downloaded once into `cache_dir`, keyed by
        the object's URL and size, published by an atomic rename so concurrent readers never see half."""
        size = self.size(name)
        if size is None:
            raise FileNotFoundError(self.path(name))
        cache = Path(cache_dir or default_cache_dir())
        tag = hashlib.sha256(f"{self.path(name)}:{size}".encode()).hexdigest()[:16]
        target = cache / f"{tag}-{name}"
        if target.exists() and target.stat().st_size == size:
            return target
        LocalStorage(cache).write_atomic(target.name, self.read(name))
        return target

    @contextlib.contextmanager
    def writer(self, name: str) -> Iterator[BinaryIO]:
        """Spool to a local temporary file; upload it in one piece only when the block exits cleanly."""
        fd, spool = tempfile.mkstemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", suffix=TMP_SUFFIX)
        try:
            try:
                with os.fdopen(fd, "wb") as f:
                    yield f
            except OSError as err:
                if err.filename is not None or err.errno is None:
                    raise
                # The local temp folder filled up, not the store: say which disk it was.
                raise OSError(
                    err.errno, err.strerror, f"{spool} (local spool of {self.path(name)}; set TMPDIR to a larger disk)"
                ) from None
            with self._missing_bucket(name), self._errors(name):
                self.fs.put_file(spool, self._key(name))
        finally:
            Path(spool).unlink(missing_ok=True)

    def write_atomic(self, name: str, data: bytes) -> None:
        """One PUT of the whole object: it is visible complete or not at all."""
        with self._missing_bucket(name), self._errors(name):
            self.fs.pipe_file(self._key(name), data)

    def remove(self, name: str) -> None:
        try:
            with self._errors(name):
                self.fs.rm_file(self._key(name))
        except FileNotFoundError:
            pass

    def cleanup_tmp(self) -> int:
        """Nothing temporary is ever written to the store; drop local spools of writers that died."""
        removed = 0
        for spool in Path(tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}*{TMP_SUFFIX}"):
            pid = spool.name[len(SPOOL_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                spool.unlink(missing_ok=True)
                removed += 1
        return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300]


Storage = LocalStorage | FsspecStorage


def is_remote(url: str | os.PathLike) -> bool:
    url = str(url)
    return "://" in url and not url.startswith("file://")


def absolute_location(url: str | os.PathLike) -> str:
    """A local path made absolute (a file:// URL's path too), a remote URL as it is: what a run records, so that
    it reads the same files from any folder."""
    url = str(url)
    if is_remote(url):
        return url
    if url.startswith("file://"):
        return "file://" + os.path.abspath(url.removeprefix("file://"))
    return os.path.abspath(url)


def open_storage(url: str | os.PathLike) -> Storage:
    """LocalStorage for a path or file:// URL, FsspecStorage for any other fsspec URL (s3://, gs://...)."""
    url = str(url)
    if is_remote(url):
        return FsspecStorage(url)
    return LocalStorage(url.removeprefix("file://"))


CACHE_ENV = "PENCIL_CACHE_DIR"  # where remote arrays (the shipped graph) are cached locally


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "pencil-cache")


def local_file(url: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """A local path holding the object at `url`: the file itself when local, else a cached download
    (for arrays that are memory-mapped, e.g. a shard set's graph)."""
    url = str(url)
    if not is_remote(url):
        return Path(url.removeprefix("file://"))
    root, _, name = url.rstrip("/").rpartition("/")
    return open_storage(root).local_path(name, cache_dir or default_cache_dir())


def read_url(url: str | os.PathLike) -> bytes:
    """The bytes of one object, local path or URL; a missing one raises FileNotFoundError."""
    url = str(url)
    if not is_remote(url):
        return Path(url.removeprefix("file://")).read_bytes()
    root, _, name = url.rstrip("/").rpartition("/")
    return open_storage(root).read(name)


def join(url: str | os.PathLike, *names: str) -> str:
    """`url`/name/... for a local path or a URL (no os.path semantics on URLs)."""
    out = str(url).rstrip("/")
    for name in names:
        out = f"{out}/{name}"
    return out
