"""The manifest's schema and checksum: what a shard set's `manifest.json` must hold to be read at all.

common/shards.py writes and reads manifests; this module only judges one (pure functions, no I/O), so
the writer (which refuses to write a manifest that breaks them), the reader (trainer, pipelines) and
preprocess's cache hit all apply the same rules. A manifest is untrusted input: every field the readers
use is checked for type and range, shard and file names must be plain names inside the set (no `/`, no
`..`), the shard list must agree with the `sets` that claim it, and `checksum` (sha256 of the canonical
JSON of every other field) catches an edit by hand that the rules alone would let through.

`schema_problem` returns "field: what is wrong" or None; the caller adds the file and the fix.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

# Manifest layout version, separate from the shard format version (which is part of the cache key):
# 2 added `files` (a sha256 for every non-shard file) and `checksum`; older manifests are refused with a
# pointer to a preprocess rerun, which keeps their shards (they pass the resume checks) and rewrites the rest.
MANIFEST_VERSION = 2
CHECKSUM = "checksum"
LOCAL_FIELDS = ("root", CHECKSUM)  # `root` is added by the reader, not stored

MAX_COUNT = 2**40  # links, nodes, entries: far above any real set, far below what would overflow int64 maths
MAX_BYTES = 2**50
MAX_SHARD_LINKS = 2**31  # one shard closes at --links-per-shard or --shard-mb: never near this
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,200}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
SPLITS = ("train", "valid", "test")
GRAPHS = ("train", "test")


class Invalid(ValueError):
    """One schema violation: str(err) is "field: problem"."""


def checksum(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON (sorted keys, no spaces) without `checksum` and `root`."""
    body = {k: v for k, v in manifest.items() if k not in LOCAL_FIELDS}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def set_files(m: dict) -> list[str]:
    """Names of the set's non-shard files that `m` refers to (graphs, queries, features), sorted."""
    names = {f for g in (m.get("graphs") or {}).values() for f in graph_files(g)}
    names |= {e["queries"] for e in (m.get("eval") or {}).values()}
    if m.get("features"):
        names.add(m["features"]["file"])
    if m.get("node_ids"):
        names.add(m["node_ids"]["file"])
    return sorted(names)


def graph_files(g: dict) -> list[str]:
    """The files of one `graphs` entry: its CSR arrays, a directed set's out-edge CSR (`out`) and a typed set's
    triple CSR (`rel`) and a temporal set's edge times (`times`)."""
    out, rel, times = g.get("out") or {}, g.get("rel") or {}, g.get("times") or {}
    return (
        [g[p] for p in ("indptr", "indices")]
        + [out[p] for p in ("indptr", "indices") if p in out]
        + [rel[p] for p in ("indptr", "indices", "relation") if p in rel]
        + ([times["file"]] if "file" in times else [])
    )


def schema_problem(m: dict) -> str | None:
    """The first schema violation of manifest `m` as "field: problem", or None when it is well formed."""
    try:
        _check(m)
    except Invalid as err:
        return str(err)
    return None


# ---------------------------------------------------------------------------- field checkers
def _int(value, field: str, lo: int, hi: int) -> int:
    if value is None:
        raise Invalid(f"{field}: missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{field}: {value!r} is not an integer")
    if not lo <= value <= hi:
        raise Invalid(f"{field}: {value} is outside [{lo}, {hi}]")
    return value


def _str(value, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise Invalid(f"{field}: {value!r} is not a non-empty string")
    return value


def _dict(value, field: str) -> dict:
    if not isinstance(value, dict):
        raise Invalid(f"{field}: missing or not an object")
    return value


def _list(value, field: str) -> list:
    if not isinstance(value, list):
        raise Invalid(f"{field}: missing or not a list")
    return value


def _name(value, field: str, suffix: str) -> str:
    """A plain file name inside the set: no folder part, no `..`, no absolute path."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or not value.endswith(suffix) or ".." in value:
        raise Invalid(f"{field}: {value!r} is not a plain {suffix} file name inside the set")
    return value


def _sha(value, field: str) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise Invalid(f"{field}: {value!r} is not a sha256 (64 lowercase hex digits)")
    return value


def _identity(rec: dict, field: str) -> tuple:
    """(split, protocol, view) of a shard or set record: train has a view and no protocol, eval the reverse."""
    split = rec.get("split")
    if split not in SPLITS:
        raise Invalid(f"{field}.split: {split!r} is not one of {', '.join(SPLITS)}")
    if split == "train":
        if rec.get("protocol") is not None:
            raise Invalid(f"{field}.protocol: a train record has no protocol, found {rec['protocol']!r}")
        return split, None, _int(rec.get("view"), f"{field}.view", 0, 2**20)
    if rec.get("view") is not None:
        raise Invalid(f"{field}.view: an eval record has no view, found {rec['view']!r}")
    return split, _str(rec.get("protocol"), f"{field}.protocol"), None


# ---------------------------------------------------------------------------- the manifest
def _check(m: dict) -> None:
    _int(m.get("num_nodes"), "num_nodes", 1, MAX_COUNT)
    _int(m.get("n_max"), "n_max", 2, 2**31 - 1)
    if m.get("views") is not None:
        _int(m["views"], "views", 0, 2**20)
    for field in ("dataset", "key", "fingerprint"):
        if field in m:
            _str(m[field], field)
    graphs = _graphs(m)
    files = _files(m)
    shards = _shards(m)
    _sets(m, shards, graphs)
    referenced = _eval(m) | {f for g in graphs.values() for f in graph_files(g)} | _features(m) | _node_ids(m)
    if missing := sorted(referenced - set(files)):
        raise Invalid(f"files: no sha256 for {missing[0]}")
    if extra := sorted(set(files) - referenced):
        raise Invalid(f"files.{extra[0]}: not a file of the set")
    _totals(m, shards)
    if m.get("targets") is not None:
        _dict(m["targets"], "targets")
    _sha(m.get(CHECKSUM), CHECKSUM)


def _graphs(m: dict) -> dict:
    graphs = _dict(m.get("graphs"), "graphs")
    directed = m.get("directed", False)
    if not isinstance(directed, bool):
        raise Invalid(f"directed: {directed!r} is not true or false")
    if "train" not in graphs:
        raise Invalid("graphs.train: missing (every set ships the graph its links were sampled on)")
    for which, g in graphs.items():
        where = f"graphs.{which}"
        if which not in GRAPHS:
            raise Invalid(f"{where}: unknown graph (known: {', '.join(GRAPHS)})")
        _dict(g, where)
        for part in ("indptr", "indices"):
            if g.get(part) != f"graph-{which}-{part}.npy":
                raise Invalid(f"{where}.{part}: {g.get(part)!r} is not graph-{which}-{part}.npy")
        _int(g.get("num_nodes"), f"{where}.num_nodes", 1, MAX_COUNT)
        _int(g.get("num_entries"), f"{where}.num_entries", 0, MAX_COUNT)
        _out_graph(g.get("out"), which, directed)
        _rel_graph(g.get("rel"), which, _relations(m))
        _times(g.get("times"), which)
    return graphs


def _times(times, which: str) -> None:
    """A temporal set's edge times of one graph (absent on every other set): its file and the time it ends at."""
    if times is None:
        return
    where = f"graphs.{which}.times"
    _dict(times, where)
    if times.get("file") != f"graph-{which}-times.npy":
        raise Invalid(f"{where}.file: {times.get('file')!r} is not graph-{which}-times.npy")
    end = times.get("end")
    if isinstance(end, bool) or not isinstance(end, (int, float)) or not math.isfinite(end):
        raise Invalid(f"{where}.end: {end!r} is not a finite number")


def _relations(m: dict) -> list:
    """A typed set's relation names in id order (distinct non-empty strings; shard format 4), [] otherwise."""
    names = m.get("relations")
    if names is None:
        return []
    names = _list(names, "relations")
    if not names or len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise Invalid("relations: must be a non-empty list of distinct relation names")
    if m.get("directed") is not True:
        raise Invalid("relations: a typed set is directed (directed: true)")
    return names


def _rel_graph(rel, which: str, relations: list) -> None:
    """A typed set ships each graph's triple CSR (`rel`: indptr, indices, relation); any other set none."""
    where = f"graphs.{which}.rel"
    if not relations:
        if rel is not None:
            raise Invalid(f"{where}: an untyped set (no relations) ships no relation graph")
        return
    _dict(rel, where)
    for part in ("indptr", "indices", "relation"):
        if rel.get(part) != f"graph-{which}-rel-{part}.npy":
            raise Invalid(f"{where}.{part}: {rel.get(part)!r} is not graph-{which}-rel-{part}.npy")
    _int(rel.get("num_entries"), f"{where}.num_entries", 0, MAX_COUNT)


def _out_graph(out, which: str, directed: bool) -> None:
    """A directed set ships each graph's out-edge CSR (`out`); an undirected one none."""
    where = f"graphs.{which}.out"
    if not directed:
        if out is not None:
            raise Invalid(f"{where}: an undirected set (directed absent or false) ships no out-edge graph")
        return
    _dict(out, where)
    for part in ("indptr", "indices"):
        if out.get(part) != f"graph-{which}-out-{part}.npy":
            raise Invalid(f"{where}.{part}: {out.get(part)!r} is not graph-{which}-out-{part}.npy")
    _int(out.get("num_entries"), f"{where}.num_entries", 0, MAX_COUNT)


def _files(m: dict) -> dict:
    files = _dict(m.get("files"), "files")
    for name, rec in files.items():
        _name(name, f"files.{name}", "")
        _dict(rec, f"files.{name}")
        _int(rec.get("bytes"), f"files.{name}.bytes", 1, MAX_BYTES)
        _sha(rec.get("sha256"), f"files.{name}.sha256")
    return files


def _shards(m: dict) -> list[dict]:
    shards = _list(m.get("shards"), "shards")
    if not shards:
        raise Invalid("shards: the list is empty")
    seen = set()
    for i, rec in enumerate(shards):
        where = f"shards[{i}]"
        _dict(rec, where)
        name = _name(rec.get("name"), f"{where}.name", ".tar")
        if name in seen:
            raise Invalid(f"{where}.name: {name} is listed twice")
        seen.add(name)
        where = f"shards[{i}] ({name})"
        _identity(rec, where)
        _int(rec.get("links"), f"{where}.links", 1, MAX_SHARD_LINKS)
        _int(rec.get("tokens"), f"{where}.tokens", 0, MAX_BYTES)
        _int(rec.get("blocks"), f"{where}.blocks", 1, MAX_COUNT)
        _int(rec.get("bytes"), f"{where}.bytes", 1, MAX_BYTES)
        _sha(rec.get("sha256"), f"{where}.sha256")
    return shards


def _sets(m: dict, shards: list[dict], graphs: dict) -> None:
    """Every shard belongs to one set, and each set's shard count and link total match its shards:
    a dropped or duplicated shard entry shows here even before the checksum is looked at."""
    sets = _list(m.get("sets"), "sets")
    claimed = {}
    for i, rec in enumerate(sets):
        where = f"sets[{i}]"
        _dict(rec, where)
        ident = _identity(rec, where)
        if ident in claimed:
            raise Invalid(f"{where}: set {_label(ident)} is listed twice")
        if rec.get("graph") not in graphs:
            raise Invalid(f"{where}.graph: {rec.get('graph')!r} is not a graph of the set ({', '.join(graphs)})")
        claimed[ident] = (
            _int(rec.get("links"), f"{where}.links", 0, MAX_COUNT),
            _int(rec.get("shards"), f"{where}.shards", 0, MAX_COUNT),
            i,
        )
    held: dict[tuple, list] = {}
    for rec in shards:
        ident = (rec["split"], rec.get("protocol"), rec.get("view"))
        if ident not in claimed:
            raise Invalid(f"shards ({rec['name']}): belongs to no set in `sets` ({_label(ident)})")
        held.setdefault(ident, []).append(rec["links"])
    for ident, (links, count, i) in claimed.items():
        have = held.get(ident, [])
        if len(have) != count:
            raise Invalid(f"shards: set {_label(ident)} has {len(have)} shard entries, sets[{i}] says {count}")
        if sum(have) != links:
            raise Invalid(f"shards: set {_label(ident)} holds {sum(have)} links, sets[{i}] says {links}")
        if count == 0 and links:
            raise Invalid(f"sets[{i}]: {links} links in no shard")
    views = m.get("views") or 0
    if "train" in {ident[0] for ident in claimed}:
        for v in range(views):
            if not held.get(("train", None, v)):
                raise Invalid(f"shards: no shard for training view {v} (views = {views})")


def _eval(m: dict) -> set[str]:
    """Every eval set with links has an `eval` entry naming its queries file; returns the file names."""
    evals = _dict(m.get("eval"), "eval")
    names = set()
    for key, e in evals.items():
        where = f"eval.{key}"
        _dict(e, where)
        split, _, protocol = key.partition("/")
        want = f"{split}-{protocol}-queries.npz"
        if split not in SPLITS[1:] or not protocol or _name(e.get("queries"), f"{where}.queries", ".npz") != want:
            raise Invalid(f"{where}.queries: {e.get('queries')!r} is not {want}")
        names.add(want)
        for field in ("kind", "metric"):
            if field in e:
                _str(e[field], f"{where}.{field}")
        for field in ("positives", "candidates"):
            if field in e:
                _int(e[field], f"{where}.{field}", 0, MAX_COUNT)
    for i, rec in enumerate(m["sets"]):
        if rec["split"] != "train" and rec["links"] and f"{rec['split']}/{rec['protocol']}" not in evals:
            raise Invalid(f"eval: no entry for {rec['split']}/{rec['protocol']} (sets[{i}])")
    return names


def _features(m: dict) -> set[str]:
    f = m.get("features")
    if f is None:
        return set()
    _dict(f, "features")
    dim = _int(f.get("dim"), "features.dim", 1, 2**20)
    for kind, span in (f.get("kinds") or {}).items():  # a typed graph's table per node kind: its columns
        if not (isinstance(span, list) and len(span) == 2 and all(type(v) is int for v in span)) or not (
            0 <= span[0] <= span[1] <= dim
        ):
            raise Invalid(f"features.kinds.{kind}: expected [start, stop] columns within 0..{dim}, got {span!r}")
    return {_name(f.get("file"), "features.file", ".npy")}


def _node_ids(m: dict) -> set[str]:
    """An edge list's user ids (common/node_ids.py): one per node."""
    e = m.get("node_ids")
    if e is None:
        return set()
    _dict(e, "node_ids")
    if _int(e.get("count"), "node_ids.count", 1, MAX_COUNT) != m["num_nodes"]:
        raise Invalid(f"node_ids.count: {e['count']}, the set has num_nodes {m['num_nodes']}")
    if e.get("dtype") not in ("string", "int64", "uint64"):
        raise Invalid(f"node_ids.dtype: {e.get('dtype')!r} is not one of string, int64, uint64")
    return {_name(e.get("file"), "node_ids.file", ".parquet")}


def _totals(m: dict, shards: list[dict]) -> None:
    totals = m.get("totals")
    if totals is None:
        return
    _dict(totals, "totals")
    for field in ("links", "tokens", "bytes"):
        want = sum(r[field] for r in shards)
        if totals.get(field) != want:
            raise Invalid(f"totals.{field}: {totals.get(field)!r}, its shards sum to {want}")


def _label(ident: tuple) -> str:
    split, protocol, view = ident
    return f"train view {view}" if split == "train" else f"{split}/{protocol}"
