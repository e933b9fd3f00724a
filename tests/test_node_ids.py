"""A user's own node ids and files.

Ids of any kind (strings, 64-bit, negative) map to 0..N-1 and back; CSV/TSV (gzipped or not) and
Parquet load the same graph; a node list adds isolated nodes; the memory bound refuses before it
allocates (checked in a child process whose address space is capped); the sort-based unique and the
hashed id mapping equal numpy's; a dead RAY_ADDRESS fails in one line; embedded Ray starts without
the token notice.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from common import unique as unique_mod
from common.datasets import DatasetError, DatasetSpec, load_dataset
from common.datasets import ids as ids_mod
from common.datasets.ids import node_index
from common.unique import unique_first, unique_inverse, unique_sorted, unique_sorted_inplace
from tests.conftest import needs_ray

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- helpers
def ring_with_chords(ids: list, chords: int = 40, seed: int = 0) -> list[tuple]:
    """A connected graph over `ids`: a ring plus seeded chords (no self-loops, no duplicates)."""
    rng = np.random.default_rng(seed)
    n = len(ids)
    edges = {(i, (i + 1) % n) for i in range(n)}
    while len(edges) < n + chords:
        a, b = (int(x) for x in rng.integers(0, n, 2))
        if a != b and (a, b) not in edges and (b, a) not in edges:
            edges.add((a, b))
    return [(ids[a], ids[b]) for a, b in sorted(edges)]


def write_table(path: Path, rows: list[tuple], columns=("src", "dst")) -> Path:
    df = pd.DataFrame(rows, columns=list(columns))
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        df.to_parquet(path)
    else:
        text = df.to_csv(index=False, sep="\t" if ".tsv" in name else ",")
        path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    return path


def user_edges(ds) -> set[frozenset]:
    """Every positive of every split, named by the user's ids."""
    pairs = np.concatenate([ds.splits[s].pos for s in ("train", "valid", "test")])
    return {frozenset((ds.node_ids[a], ds.node_ids[b])) for a, b in pairs.tolist()}


# ---------------------------------------------------------------------------- sort-based unique
@pytest.mark.parametrize("kind", ["int64", "negative", "uint64", "strings", "empty", "one"])
def test_fast_unique_equals_numpy(kind):
    rng = np.random.default_rng(7)
    a = {
        "int64": lambda: rng.integers(0, 500, 5000),
        "negative": lambda: rng.integers(-(2**62), 2**62, 3000) // 2**50,
        "uint64": lambda: rng.integers(0, 50, 2000).astype(np.uint64) + np.uint64(2**63),
        "strings": lambda: np.array([f"n{v}" for v in rng.integers(0, 300, 2000)]),
        "empty": lambda: np.zeros(0, np.int64),
        "one": lambda: np.array([5]),
    }[kind]()
    uniq, first, inverse = np.unique(a, return_index=True, return_inverse=True)
    assert np.array_equal(unique_sorted(a), uniq)
    got_uniq, got_inverse = unique_inverse(a)
    assert np.array_equal(got_uniq, uniq) and np.array_equal(got_inverse, inverse.ravel())
    assert np.array_equal(unique_first(a), np.sort(first))
    assert np.array_equal(unique_sorted_inplace(a.copy()), uniq)


@pytest.mark.parametrize("chunk", [1, 2, 7, 1000])
def test_inplace_unique_across_chunk_edges(monkeypatch, chunk):
    """Runs of equal keys that straddle the in-place compaction's chunk boundaries."""
    monkeypatch.setattr(unique_mod, "COMPACT_CHUNK", chunk)
    a = np.repeat(np.random.default_rng(1).integers(0, 40, 60), np.random.default_rng(2).integers(1, 9, 60))
    assert np.array_equal(unique_sorted_inplace(a.copy()), np.unique(a))


def _reference_map(arrays: dict) -> tuple[dict, np.ndarray]:
    """The slow, obvious mapping: np.unique over all columns, inverse split back."""
    whole = np.concatenate(list(arrays.values()))
    uniq, inverse = np.unique(whole, return_inverse=True)
    out, at = {}, 0
    for k, a in arrays.items():
        out[k] = inverse.ravel()[at : at + a.size]
        at += a.size
    return out, uniq


@pytest.mark.parametrize("kind", ["spread", "negative", "extremes", "uint64", "duplicates", "two"])
def test_hashed_id_mapping_equals_numpy(kind):
    """Ids spread too wide for the table take the hash path; node i is still the i-th smallest id."""
    rng = np.random.default_rng(11)
    top = np.iinfo(np.int64)
    pool = {
        "spread": lambda: rng.integers(0, top.max, 700, dtype=np.int64),
        "negative": lambda: rng.integers(top.min, top.max, 700, dtype=np.int64),
        "extremes": lambda: np.array([top.min, top.min + 1, -1, 0, 1, top.max - 1, top.max], np.int64),
        "uint64": lambda: rng.integers(0, 2**64 - 1, 700, dtype=np.uint64, endpoint=True),
        "duplicates": lambda: rng.integers(-(2**62), 2**62, 5, dtype=np.int64),
        "two": lambda: np.array([-(2**40), 2**61], np.int64),
    }[kind]()
    arrays = {c: pool[rng.integers(0, len(pool), n)] for c, n in (("src", 3000), ("dst", 2500), ("node", 40))}
    want, want_ids = _reference_map(arrays)
    got, got_ids, how = ids_mod._map_numbers({k: v.copy() for k, v in arrays.items()})
    assert how == "integers, hashed" and got_ids.dtype == arrays["src"].dtype
    assert np.array_equal(got_ids, want_ids)
    for k in arrays:
        assert np.array_equal(got[k], want[k]), k
        assert np.array_equal(got_ids[got[k]], arrays[k]), k  # back to the user's ids


def test_hashed_id_mapping_by_hand():
    """Exact values: 5 distinct ids over 64 bits, first seen out of order."""
    src = np.array([2**62, -7, 2**62, 123456789012, -(2**63)], np.int64)
    dst = np.array([-7, 0, 123456789012, 2**62, 0], np.int64)
    got, node_ids, how = ids_mod._map_numbers({"src": src, "dst": dst})
    assert how == "integers, hashed"
    assert node_ids.tolist() == [-(2**63), -7, 0, 123456789012, 2**62]
    assert got["src"].tolist() == [4, 1, 4, 3, 0] and got["dst"].tolist() == [1, 2, 3, 4, 2]


def test_hashed_id_mapping_with_a_dictionary_per_column(monkeypatch):
    """Arrow shares one dictionary across the chunks; were each column encoded on its own, the ranks
    still come out right (every dictionary gets its own rank table into the sorted union)."""
    real = ids_mod.pc.dictionary_encode

    def per_chunk(arr):
        return ids_mod.pa.chunked_array([real(c) for c in arr.chunks])

    monkeypatch.setattr(ids_mod.pc, "dictionary_encode", per_chunk)
    rng = np.random.default_rng(3)
    arrays = {
        "src": rng.integers(-(2**63), 2**63 - 1, 900, dtype=np.int64) // 7,
        "dst": rng.integers(0, 2**63 - 1, 800, dtype=np.int64),
    }
    arrays["dst"][:300] = arrays["src"][:300]  # shared ids, in another first-seen order
    want, want_ids = _reference_map(arrays)
    got, got_ids, _ = ids_mod._map_numbers({k: v.copy() for k, v in arrays.items()})
    assert np.array_equal(got_ids, want_ids)
    assert all(np.array_equal(got[k], want[k]) for k in arrays)


# ---------------------------------------------------------------------------- ids round-trip
def test_string_ids_round_trip(tmp_path):
    names = [f"gene-{i * 7919 % 1000:03d}" for i in range(120)] + ["Ω-ünïcode", "with space", "007", "7"]
    rows = ring_with_chords(names)
    ds = load_dataset(DatasetSpec(str(write_table(tmp_path / "genes.csv", rows))))
    assert ds.num_nodes == len(names) and ds.node_ids.dtype == object
    assert list(ds.node_ids) == sorted(names)  # sorted by code point: independent of the row order
    assert user_edges(ds) == {frozenset(r) for r in rows}
    idx, found = node_index(ds.node_ids, ["007", "7", "Ω-ünïcode", "nobody"])
    assert found.tolist() == [True, True, True, False]
    assert [ds.node_ids[i] for i in idx[:3]] == ["007", "7", "Ω-ünïcode"]


@pytest.mark.parametrize(
    "ids, dtype",
    [
        ([2**63 + 5, 2**64 - 1, 2**63, 17, 0], np.uint64),  # above int64: unsigned, not "negative"
        ([-(2**63), -5, 0, 2**63 - 1, 2_147_483_653], np.int64),  # negative and the largest signed
        ([-5, 2**63 + 5, 3, 2**64 + 9], object),  # no 64-bit type holds them all: their text
    ],
)
def test_64bit_ids_round_trip(tmp_path, ids, dtype):
    ids = ids + list(range(1000, 1060))
    rows = ring_with_chords(ids)
    for ext in (".csv", ".tsv.gz") + ((".parquet",) if dtype is not object else ()):
        ds = load_dataset(DatasetSpec(str(write_table(tmp_path / f"big{ext}", rows))))
        assert ds.node_ids.dtype == dtype and ds.num_nodes == len(ids), ext
        want = sorted(ids) if dtype is not object else sorted(str(i) for i in ids)
        assert list(ds.node_ids) == want, ext
        named = {frozenset(r) for r in rows} if dtype is not object else {frozenset(map(str, r)) for r in rows}
        assert user_edges(ds) == named, ext


def test_issue18_huge_id_is_mapped_not_allocated(tmp_path):
    """1,500 edges plus the row 2147483653,3 once made num_nodes = 2^31 + 6 (24 GB, killed)."""
    rows = ring_with_chords(list(range(300)), chords=1200) + [(2_147_483_653, 3)]
    ds = load_dataset(DatasetSpec(str(write_table(tmp_path / "sparse.csv", rows))))
    assert ds.num_nodes == 301 and ds.node_ids[-1] == 2_147_483_653
    assert ds.graph.indptr.shape == (302,)


def test_dense_ids_map_to_themselves(tmp_path):
    rows = ring_with_chords(list(range(50)))
    ds = load_dataset(DatasetSpec(str(write_table(tmp_path / "dense.csv", rows))))
    assert np.array_equal(ds.node_ids, np.arange(50))
    assert user_edges(ds) == {frozenset(r) for r in rows}


# ---------------------------------------------------------------------------- formats and node lists
def test_every_format_loads_the_same_graph(tmp_path):
    rows = ring_with_chords([f"u{i}" for i in range(80)])
    prints = {}
    for ext in (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".parquet", ".pq"):
        ds = load_dataset(DatasetSpec(str(write_table(tmp_path / f"edges{ext}", rows)), seed=3))
        assert ds.name == "edges"
        prints[ext] = (ds.fingerprint(), tuple(ds.node_ids))
    assert len(set(prints.values())) == 1, prints


def test_node_list_declares_isolated_nodes(tmp_path):
    rows = ring_with_chords([f"u{i}" for i in range(40)])
    nodes = write_table(tmp_path / "nodes.csv", [(f"u{i}",) for i in range(45)], columns=("node",))
    ds = load_dataset(DatasetSpec(str(write_table(tmp_path / "e.csv", rows)), nodes=str(nodes)))
    assert ds.num_nodes == 45
    lonely, found = node_index(ds.node_ids, [f"u{i}" for i in range(40, 45)])
    assert found.all() and np.all(ds.graph.degree[lonely] == 0)
    with pytest.raises(DatasetError, match="a node list applies to edge-list files only"):
        load_dataset(DatasetSpec("citeseer", nodes=str(nodes)))


def test_run_nodes_flag_declares_isolated_nodes(tmp_path):
    """pipelines.run --nodes: its dataset, and the preprocess job of its (and the auto search's) shard sets."""
    from pipelines.core.shard_sets import preprocess_config
    from tests.conftest import run_config

    rows = ring_with_chords([2**40 + 3 * i for i in range(40)])
    edges = write_table(tmp_path / "e.csv", rows)
    nodes = write_table(
        tmp_path / "nodes.tsv", [(2**40 + 3 * i,) for i in range(40)] + [(-9,), (2**62,)], columns=("id",)
    )
    base = ["--dataset", str(edges), "--seeds", "0,1,2", "--out", str(tmp_path / "r"), "--shards", str(tmp_path / "s")]
    run = run_config(*base, "--nodes", nodes)
    ds = load_dataset(run.source)
    assert ds.num_nodes == 42 and ds.node_ids[0] == -9 and ds.node_ids[-1] == 2**62
    assert ds.graph.degree[[0, 41]].tolist() == [0, 0] and user_edges(ds) == {frozenset(r) for r in rows}
    cfg = preprocess_config(run.source, run.shards, (1, 3), 1, 100.0, ["original"])
    assert cfg.data.nodes == str(nodes) and cfg.data.dataset == str(edges)
    plain = run_config(*base)
    assert load_dataset(plain.source).num_nodes == 40
    assert preprocess_config(plain.source, plain.shards, (1, 3), 1, 100.0, ["original"]).data.nodes is None


def test_random_bytes_file_is_one_line(tmp_path):
    path = tmp_path / "noise.csv"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(DatasetError) as err:
        load_dataset(DatasetSpec(str(path)))
    text = str(err.value)
    assert "\n" not in text and str(path) in text and "negative" not in text
    assert "header 'src,dst[,split]'" in text or "missing column" in text


# ---------------------------------------------------------------------------- bounded memory, real processes
CAPPED = textwrap.dedent("""
    import resource, sys
    from preprocess.__main__ import main
    import pyarrow.csv, pyarrow.parquet, common.datasets.edgelist, preprocess.job  # imported before the cap
    size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
    cap = size + int(sys.argv[1]) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    sys.exit(main(sys.argv[2:]))
""")


def run_capped(headroom_mb: int, *args) -> subprocess.CompletedProcess:
    """python -m preprocess ARGS in a child that may map only `headroom_mb` more than its imports did."""
    return subprocess.run(
        [sys.executable, "-c", CAPPED, str(headroom_mb), *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error" in line.lower()]


def test_too_many_rows_refused_before_reading(tmp_path):
    rng = np.random.default_rng(0)
    edges = rng.integers(0, 10**12, size=(1_000_000, 2))
    path = tmp_path / "many.csv"
    np.savetxt(path, edges, fmt="%d", delimiter=",", header="src,dst", comments="")
    proc = run_capped(64, "--dataset", path, "--out", tmp_path / "out")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "many.csv: 1,0" in lines[0] and "rows (estimated from its size)" in lines[0], lines[0]
    assert "GiB of memory needed" in lines[0] and "split the edge list" in lines[0], lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.npy"))


def test_sparse_zero_based_folder_refused_before_allocation(tmp_path):
    """The issue-18 row in a HeaRT-format folder (0-based by contract): refused, not a 24 GB allocation."""
    folder = tmp_path / "heart"
    folder.mkdir()
    train = ring_with_chords(list(range(300)), chords=1200) + [(2_147_483_653, 3)]
    np.savetxt(folder / "train_pos.txt", train, fmt="%d")
    for split in ("valid", "test"):
        np.savetxt(folder / f"{split}_pos.txt", [(0, 5), (1, 7)], fmt="%d")
    proc = run_capped(1024, "--dataset", "mine", "--data-dir", folder, "--out", tmp_path / "out")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "node id 2,147,483,653 makes 2,147,483,654 nodes" in lines[0] and "edge-list file" in lines[0]


def test_issue18_row_loads_under_a_memory_cap(tmp_path):
    """The same row in an edge list is just one more id: it loads within 1 GB more than the imports."""
    rows = ring_with_chords(list(range(300)), chords=1200) + [(2_147_483_653, 3)]
    path = write_table(tmp_path / "sparse.csv", rows)
    script = CAPPED.replace(
        "sys.exit(main(sys.argv[2:]))",
        "from common.datasets import DatasetSpec, load_dataset\n"
        "print(load_dataset(DatasetSpec(sys.argv[2])).num_nodes)",
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, "1024", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == "301"


# ---------------------------------------------------------------------------- Ray start-up
def test_dead_ray_address_fails_in_one_line(tmp_path):
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "preprocess", "--dataset", "citeseer", "--out", str(tmp_path / "o")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "python -m preprocess: error: RAY_ADDRESS=127.0.0.1:1: no Ray cluster answers there (connection refused); "
        "start one (`ray start --head`) or fix the address, or unset RAY_ADDRESS to use an embedded Ray"
    ]
    assert not (tmp_path / "o").exists()  # refused before anything was loaded or written


@needs_ray
def test_embedded_ray_starts_without_token_notice():
    code = "from preprocess.cluster import init_ray\nimport ray\nassert init_ray(1)\nray.shutdown()\n"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Token authentication" not in proc.stderr and "token" not in proc.stderr.lower(), proc.stderr[-2000:]


# ---------------------------------------------------------------------------- scores speak the user's ids
@pytest.mark.slow  # a Ray job and three scoring processes: about a minute on 2 busy cores
@needs_ray
def test_score_under_user_ids_equals_score_under_mapped_ids(tmp_path):
    import pyarrow.parquet as pq
    import torch

    from common.node_ids import load_node_ids
    from common.presets import get_preset
    from common.shards import NODE_IDS, read_manifest
    from pipelines.score import Scoring, score_pairs
    from preprocess.config import CandidateConfig, PreprocessConfig, SamplingConfig
    from preprocess.job import run_job
    from trainer.config import TrainConfig
    from trainer.config_sections import DataConfig
    from trainer.model.pencil import model_for_shards

    names = [f"user-{i * 7919 % 100_003}" for i in range(200)]
    edges = write_table(tmp_path / "people.csv", ring_with_chords(names, chords=600))
    config = PreprocessConfig(
        data=DatasetSpec(str(edges)),
        sampling=SamplingConfig(1, 3),
        out=str(tmp_path / "shards"),
        candidates=CandidateConfig(views=1, splits=("valid",)),
        num_cpus=1,
        links_per_shard=256,
        links_per_block=64,
    )
    shards = run_job(config).path
    manifest = read_manifest(shards)
    assert manifest.node_ids == {"file": NODE_IDS, "count": 200, "dtype": "string"}
    assert list(load_node_ids(manifest)) == sorted(names)  # the mapping ships with the set
    # An untrained tiny model is enough: a score is a pure function of weights, graph, pair and seed.
    torch.manual_seed(0)
    model = model_for_shards(get_preset("tiny"), {}, manifest).eval()
    run = tmp_path / "run"
    run.mkdir()
    cfg = TrainConfig(preset="tiny", out=str(run), data=DataConfig(shards=str(shards)))
    torch.save({"model": model.state_dict(), "config": cfg.to_dict(), "state": {}}, run / "best.pt")

    user = [(names[0], names[50]), (names[3], names[77]), (names[10], names[11]), (names[199], names[5])]
    pairs = write_table(tmp_path / "pairs.csv", user)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.score",
            "--checkpoint",
            str(run),
            "--pairs",
            str(pairs),
            "--out",
            str(tmp_path / "s.parquet"),
            "--device",
            "cpu",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = pq.read_table(tmp_path / "s.parquet").to_pandas()
    assert out[["src", "dst"]].values.tolist() == [list(p) for p in user]

    order = sorted(names)  # the mapping, computed independently: sorted ids -> 0..N-1
    mapped = np.array([(order.index(a), order.index(b)) for a, b in user], dtype=np.int64)
    graph = load_dataset(DatasetSpec(str(edges))).graph_for("test")
    expect = score_pairs(model, graph, mapped, Scoring((1, 3), int(manifest.n_max)), torch.device("cpu"))
    assert np.allclose(out.logit.to_numpy(), expect.mean(0), rtol=0, atol=1e-5)

    # a pair of a node with itself, or an unknown name: one line each, nothing written
    for bad, expect_text in (
        ([(names[4], names[4])], "pair a node with itself (first: data row 1, (user-31676, user-31676))"),
        ([(names[4], "nobody")], "unknown node ids (first: data row 1, (user-31676, nobody))"),
    ):
        write_table(tmp_path / "bad.csv", bad)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.score",
                "--checkpoint",
                str(run),
                "--pairs",
                str(tmp_path / "bad.csv"),
                "--out",
                str(tmp_path / "never.parquet"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert proc.returncode == 2 and expect_text in proc.stderr, proc.stderr[-2000:]
        assert not (tmp_path / "never.parquet").exists()

    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def cli(module, *args):
        proc = subprocess.run(
            [sys.executable, "-m", module, *map(str, args)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]

    # recommendations: --nodes names the user's nodes, and node / candidate come back as names
    (tmp_path / "who.txt").write_text(f"{names[0]}\n{names[3]}\n")
    cli(
        "pipelines.recommend",
        "--checkpoint",
        run,
        "--nodes",
        tmp_path / "who.txt",
        "--k",
        3,
        "--pool",
        10,
        "--out",
        tmp_path / "recs.parquet",
        "--device",
        "cpu",
        "--no-progress",
    )
    recs = pq.read_table(tmp_path / "recs.parquet").to_pandas()
    assert sorted(set(recs.node)) == sorted({names[0], names[3]}) and len(recs) == 6
    assert set(recs.candidate) <= set(names)
    train_graph = load_dataset(DatasetSpec(str(edges))).graph_for("test")
    for u, v in zip(recs.node, recs.candidate):  # never the node itself or an existing edge
        assert u != v and not train_graph.has_edge(np.array([order.index(u)]), np.array([order.index(v)]))[0]

    # today's graph: a node that joined since training is named by the user too, and scored
    today = write_table(
        tmp_path / "today.csv",
        [(names[a], names[b]) for a, b in ring_with_chords(list(range(200)), 600)]
        + [("newcomer", names[0]), ("newcomer", names[3])],
    )
    write_table(tmp_path / "new_pairs.csv", [("newcomer", names[50]), (names[0], "newcomer")])
    cli(
        "pipelines.score",
        "--checkpoint",
        run,
        "--pairs",
        tmp_path / "new_pairs.csv",
        "--graph",
        today,
        "--out",
        tmp_path / "today.parquet",
        "--device",
        "cpu",
    )
    scored = pq.read_table(tmp_path / "today.parquet").to_pandas()
    assert scored[["src", "dst"]].values.tolist() == [["newcomer", names[50]], [names[0], "newcomer"]]
    assert np.isfinite(scored.score.to_numpy()).all()


def test_node_id_file_is_checked_against_the_manifest(tmp_path):
    from common.manifest import file_record
    from common.node_ids import encode_node_ids, load_node_ids, node_ids_entry
    from common.shards import Manifest, ShardError

    ids = np.array(["gene-b", "gene-a", "gene-c"], dtype=object)
    data = encode_node_ids(ids)
    (tmp_path / "node_ids.parquet").write_bytes(data)
    manifest = Manifest.from_dict(
        {
            "root": str(tmp_path),
            "num_nodes": 3,
            "node_ids": node_ids_entry(ids),
            "files": {"node_ids.parquet": file_record(data)},
        }
    )
    assert load_node_ids(manifest).tolist() == ["gene-b", "gene-a", "gene-c"]
    (tmp_path / "node_ids.parquet").write_bytes(encode_node_ids(ids[[1, 0, 2]]))  # same size, nodes 0 and 1 swapped
    with pytest.raises(ShardError, match=r"node_ids\.parquet: checksum mismatch \(manifest [0-9a-f]{12}…, file "):
        load_node_ids(manifest)
