"""Integrity of shards that a run reuses instead of sampling them again.

A cache hit trusts a finished set only after its manifest passes the schema and its checksum, agrees
with the plan rebuilt from the config (shard names, splits, link counts; every file's sha256), and
every file matches the manifest (size, then sha256);
a resumed run (no manifest yet) trusts a shard left by a killed run only if it holds exactly the
plan's links, passes the block range checks, and re-encodes to its own bytes. Anything else is named
in one line and sampled again, so a rerun repairs a set byte-identically (content depends only on
config, seed and shard identity).
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np

from common.shards import (
    MANIFEST,
    Block,
    Manifest,
    ShardError,
    ShardWriter,
    check_block,
    iter_tar_blocks,
    parse_manifest,
)
from common.verify import set_problems

log = logging.getLogger("preprocess.job")


def verify_cached(storage, expected: dict, checksums: bool = True) -> bool:
    """True if the finished set on `storage` is the one `expected` describes (the manifest preprocess
    would write now, less run-time config and shard statistics) and every file matches its manifest
    record (size, and sha256 when `checksums`). Anything else is named in a one-line warning and False
    is returned: a bad shard is removed so the rebuild samples it again; a bad manifest, graph, queries
    or features file is simply rewritten by the rebuild (it keeps every shard that holds its plan's links)."""
    try:
        manifest = parse_manifest(storage.read(MANIFEST).decode(errors="replace"), storage.path(MANIFEST), storage.url)
    except ShardError as err:
        log.warning("%s", str(err).split("; rerun `python -m preprocess`")[0] + "; rebuilding the manifest")
        return False
    if problem := plan_mismatch(manifest, expected):
        log.warning("%s: %s; rebuilding the manifest", storage.path(MANIFEST), problem)
        return False
    problems = set_problems(manifest, checksums, storage)
    for kind, where, problem in problems:
        if kind == "shard":
            log.warning("%s: %s; sampling it again", where, problem)
            storage.remove(where.rsplit("/", 1)[-1])
        else:
            log.warning("%s: %s; writing it again", where, problem)
    return not problems


PLAN_FIELDS = ("split", "protocol", "view", "links")  # what the plan fixes of a shard; the rest is sampled
# Manifest fields the plan does not fix: checked by parse_manifest (versions, checksum), derived from the
# shards (totals), or how the run ran (config: --num-cpus and the like change nothing in the set).
UNPLANNED = ("shards", "config", "totals", "root", "checksum", "format", "version", "manifest_version")


def plan_mismatch(manifest: Manifest, expected: dict) -> str | None:
    """How a (schema-valid, checksummed) manifest differs from the plan, or None: its shard list (names,
    splits, views, link counts) and every other field, `config` (how the run ran) and `totals` aside."""
    have = {r["name"]: r for r in manifest.shards}
    stored = manifest.to_dict()  # field by field against the plan's JSON, whatever fields either holds
    want = {r["name"]: r for r in expected["shards"]}
    if missing := sorted(set(want) - set(have)):
        return f"shard {missing[0]} of the plan is not listed"
    if extra := sorted(set(have) - set(want)):
        return f"shard {extra[0]} is listed but not in the plan"
    for name, rec in want.items():
        if diff := [k for k in PLAN_FIELDS if have[name].get(k) != rec[k]]:
            return f"shard {name}: {diff[0]} is {have[name].get(diff[0])!r}, the plan has {rec[diff[0]]!r}"
    for key in sorted(set(expected) | set(stored)):
        if key in UNPLANNED or stored.get(key) == expected.get(key):
            continue
        if key == "files":
            name = next(
                n
                for n in sorted(set(expected["files"]) | set(manifest.files))
                if manifest.files.get(n) != expected["files"].get(n)
            )
            return f"files.{name}: the recorded sha256 is not the one the plan writes"
        return f"field {key!r} differs from the plan"
    return None


def shard_stats(storage, name: str, expect: dict | None = None) -> dict:
    """Re-read a finished shard, streaming: the same stats ShardWriter reported when it was written.

    With `expect` (the plan's link range and candidate arrays, num_nodes, n_max) the shard must hold
    exactly those links, pass check_block, and re-encode to its own bytes (a flipped byte anywhere,
    tar padding included, fails one of the three); a failure raises ShardError naming the shard."""
    stats = {"links": 0, "tokens": 0, "blocks": 0}
    sha = hashlib.sha256()
    where = storage.path(name)
    again = ShardWriter(_NullSink()) if expect else None
    with storage.open_read(name) as raw:
        f = _HashingReader(raw, sha)
        for block in iter_tar_blocks(f, where):
            if expect:
                _check_planned(block, stats["links"], expect, f"{where}:{stats['blocks']:06d}")
                again.add(block)
            stats["links"] += len(block)
            stats["tokens"] += block.tokens
            stats["blocks"] += 1
        f.drain()
        stats["bytes"] = f.count
    if stats["blocks"] == 0:
        raise ShardError(f"{where}: shard holds no blocks")
    stats["sha256"] = sha.hexdigest()
    if expect:
        if stats["links"] != expect["stop"] - expect["start"]:
            raise ShardError(f"{where}: holds {stats['links']} links, the plan has {expect['stop'] - expect['start']}")
        if again.close()["sha256"] != stats["sha256"]:
            raise ShardError(f"{where}: bytes differ from its decoded content (corrupt)")
    return stats


def _check_planned(block: Block, offset: int, expect: dict, where: str) -> None:
    """The block holds the plan's next links (cid, src, dst, label) with in-range node ids."""
    lo = expect["start"] + offset
    hi = lo + len(block)
    if hi > expect["stop"] or not np.array_equal(block.cid, np.arange(lo, hi)):
        raise ShardError(f"{where}: candidate ids do not match the plan (corrupt or from another run)")
    if not (
        np.array_equal(block.src, expect["src"][lo:hi])
        and np.array_equal(block.dst, expect["dst"][lo:hi])
        and np.array_equal(block.label, expect["label"][lo:hi])
    ):
        raise ShardError(f"{where}: links differ from the plan's candidates (corrupt or from another run)")
    rel = expect.get("rel")
    if (rel is None) != (block.rel is None) or (rel is not None and not np.array_equal(block.rel, rel[lo:hi])):
        raise ShardError(f"{where}: link relations differ from the plan's candidates (corrupt or from another run)")
    if expect["n_max"]:  # labels equal the plan's (above): of theirs, only finiteness is left to check
        check_block(block, expect["num_nodes"], expect["n_max"], where, regression=True)


class _NullSink:
    """A write-only file that keeps nothing (ShardWriter hashes what passes through)."""

    def write(self, data) -> int:
        return len(data)


class _HashingReader:
    """Read-through wrapper: hashes and counts every byte tarfile reads (and the padding it skips)."""

    def __init__(self, f, sha):
        self.f, self.sha, self.count = f, sha, 0

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        self.sha.update(data)
        self.count += len(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass
