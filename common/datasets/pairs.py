"""The user's own pairs: labelled evaluation pairs (`--eval-pairs`) and known non-links for training
(`--train-negatives`), checked like edge lists and attached to a loaded LinkDataset.

`--eval-pairs FILE`, columns src, dst, label (1 = link, 0 = non-link; also true / false) and optionally split
(valid / test): each split gains the protocol "pairs" beside the dataset's own ("original": random non-edges).
Its negatives are the split's non-links from the file, its positives the split's links from the file, or, where
the file has none for that split, the split's own held-out positives (a file of hard non-links alone asks "are
the real held-out links ranked above my hard cases?"). Every positive is ranked against all of the split's
non-links (shared negatives: MRR, Hits@K, AUC, AP). `--protocol pairs` builds these sets alone ("instead of"
the random negatives); the default builds both ("beside"), and the eval set's protocol names which is which.
Without a split column, a link that is a valid or test edge of the graph keeps that split and every other pair
goes to valid or test at random (seeded), at the ratio of the --split shares (5 : 10 by default).

`--train-negatives FILE`, columns src, dst (a label column, if any, must be 0 everywhere): known non-links that
make up to half of every training view's negatives (preprocess/candidates.py).

Refused, each in one line naming the file and the data row: an id that is not a node of the graph, a pair of a
node with itself, a pair marked both a link and a non-link (twice in one file, or a non-link that is an edge of
the graph), an evaluation link that is a training edge (the model trains on it) or an edge of the other
evaluation split, a pair in both valid and test, and a training negative that is also one of the file's
evaluation pairs (its label would leak into evaluation). A training negative that happens to be one of the
dataset's random evaluation negatives is left out of training, with a log line. Repeated rows count once.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.datasets.base import DatasetError, LinkDataset
from common.datasets.columns import header_names
from common.datasets.ids import node_index, numeric_ids
from common.datasets.tables import PAIR_ROWS, read_columns
from common.unique import unique_first

log = logging.getLogger(__name__)

PAIRS = "pairs"  # the protocol of the user's labelled pairs
EVAL_SPLITS = ("valid", "test")


def attach_user_pairs(
    ds: LinkDataset,
    eval_pairs=None,
    train_negatives=None,
    seed: int = 0,
    shares: tuple[float, float, float] | None = None,
) -> LinkDataset:
    """`ds` with the protocol "pairs" (eval_pairs) and its training negatives (train_negatives) attached, in
    place. shares: the --split percentages, whose valid : test ratio assigns pairs without a split column."""
    edges = {s: _keys(ds.splits[s].pos, ds.num_nodes) for s in ("train", *EVAL_SPLITS) if s in ds.splits}
    if eval_pairs is not None:
        valid, test = (shares or (85.0, 5.0, 10.0))[1:]
        _attach_eval_pairs(ds, Path(eval_pairs), edges, seed, valid / (valid + test))
    if train_negatives is not None:
        _attach_train_negatives(ds, Path(train_negatives), edges)
    return ds


# ---------------------------------------------------------------------------------- reading
class _Pairs:
    """A pairs file's rows: canonical keys u * N + v (u < v), data-row numbers, raw ids for messages."""

    def __init__(self, flag: str, path: Path, ds: LinkDataset, optional: tuple[str, ...]):
        self.flag, self.path, self.n = flag, path, ds.num_nodes
        header = header_names(path, hint="src,dst,label[,split]", rows=PAIR_ROWS)
        wanted = ("src", "dst", "label") if flag == "--eval-pairs" else ("src", "dst")
        if header and (missing := [c for c in wanted if c not in header]):
            raise DatasetError(
                f"{self.where}: no column {missing[0]!r} (found: {', '.join(header)}); {flag} reads "
                f"columns {','.join(wanted)}{'[,split]' if flag == '--eval-pairs' else '[,label]'}"
            )
        if extra := [c for c in header if c not in wanted + optional]:
            log.warning(
                "%s: column(s) %s ignored: %s reads %s",
                path.name,
                ", ".join(map(repr, extra)),
                flag,
                ", ".join(wanted + optional),
            )
        try:
            self.cols = read_columns(
                path, wanted, optional=tuple(c for c in optional if c in header), rows=PAIR_ROWS
            ).cols
        except DatasetError as err:
            raise DatasetError(f"{flag} {err}") from None
        self.raw = {k: self.cols[k] for k in ("src", "dst")}
        u, v = (self._index(k, ds) for k in ("src", "dst"))
        if (same := np.flatnonzero(u == v)).size:
            self.refuse(same[0], "a pair of a node with itself; drop the row")
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        self.keys = lo * self.n + hi

    @property
    def where(self) -> str:
        return f"{self.flag} {self.path}"

    def _index(self, col: str, ds: LinkDataset) -> np.ndarray:
        values = self.cols[col]
        if ds.node_ids is None:  # a dataset whose ids are 0..N-1 already
            nums, _ = numeric_ids(values, col, self.path)
            idx = np.full(len(values), -1, np.int64) if nums is None else nums.astype(np.int64)
            found = (idx >= 0) & (idx < self.n)
        else:
            idx, found = node_index(ds.node_ids, values)
        if not found.all():
            row = int(np.flatnonzero(~found)[0])
            raise DatasetError(
                f"{self.where}: data row {row + 1}: node id {pc.take(values, [row])[0].as_py()!r} "
                f"({col}) is not a node of the graph; pairs name nodes of the edge list (--nodes "
                "declares isolated ones)"
            )
        return idx.astype(np.int64)

    def show(self, row: int) -> str:
        return f"({self.raw['src'][int(row)].as_py()}, {self.raw['dst'][int(row)].as_py()})"

    def refuse(self, row: int, why: str):
        raise DatasetError(f"{self.where}: data row {int(row) + 1} {self.show(row)}: {why}")

    def labels(self) -> np.ndarray:
        """The label column as bool (True = link): 1 / 0, true / false; anything else refused with its row."""
        col = self.cols["label"]
        text = pc.utf8_lower(pc.utf8_trim_whitespace(col.cast(pa.string())))
        one = pc.is_in(text, pa.array(["1", "1.0", "true"])).to_numpy(zero_copy_only=False)
        zero = pc.is_in(text, pa.array(["0", "0.0", "false"])).to_numpy(zero_copy_only=False)
        if (bad := np.flatnonzero(~(one | zero))).size:
            self.refuse(bad[0], f"label {pc.take(col, [int(bad[0])])[0].as_py()!r} is not 1 (link) or 0 (non-link)")
        return one


def _keys(pos: np.ndarray, n: int) -> np.ndarray:
    pos = np.asarray(pos, dtype=np.int64).reshape(-1, 2)
    return np.unique(np.minimum(pos[:, 0], pos[:, 1]) * n + np.maximum(pos[:, 0], pos[:, 1]))


def _member(sorted_keys: np.ndarray, q: np.ndarray) -> np.ndarray:
    if not sorted_keys.size:
        return np.zeros(q.shape, dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, q), sorted_keys.size - 1)
    return sorted_keys[pos] == q


def _pairs_of(keys: np.ndarray, n: int) -> np.ndarray:
    return np.stack([keys // n, keys % n], axis=1).astype(np.int64).reshape(-1, 2)


def _first_clash(keys: np.ndarray, tag: np.ndarray) -> tuple[int, int] | None:
    """Rows (a, b) of the first key that appears with two different tags, or None."""
    order = np.lexsort((tag, keys))
    k, t = keys[order], tag[order]
    clash = np.flatnonzero((k[1:] == k[:-1]) & (t[1:] != t[:-1]))
    if not clash.size:
        return None
    a, b = order[clash[0]], order[clash[0] + 1]
    return (int(min(a, b)), int(max(a, b)))


# ---------------------------------------------------------------------------------- --eval-pairs
def _eval_split_column(pairs: _Pairs) -> np.ndarray | None:
    """0 = valid, 1 = test per row, or None without a split column."""
    if "split" not in pairs.cols:
        return None
    col = pairs.cols["split"]
    text = pc.utf8_lower(pc.utf8_trim_whitespace(col.cast(pa.string()))).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(~np.isin(text, EVAL_SPLITS))
    if bad.size:
        pairs.refuse(
            bad[0],
            f"split {text[bad[0]]!r}: evaluation pairs are valid or test (known non-links of "
            "training go to --train-negatives)",
        )
    return (text == "test").astype(np.int8)


def _attach_eval_pairs(ds: LinkDataset, path: Path, edges: dict, seed: int, valid_share: float) -> None:
    pairs = _Pairs("--eval-pairs", path, ds, optional=("split",))
    link, keys, n = pairs.labels(), pairs.keys, ds.num_nodes
    if clash := _first_clash(keys, link.astype(np.int8)):
        pairs.refuse(
            clash[1],
            f"marked a {'link' if link[clash[1]] else 'non-link'} here and a "
            f"{'link' if link[clash[0]] else 'non-link'} in data row {clash[0] + 1}; a pair is one "
            "or the other",
        )
    for s, e in edges.items():
        if (bad := np.flatnonzero(~link & _member(e, keys))).size:
            pairs.refuse(
                bad[0], f"labelled a non-link but it is a {s} edge of the graph; fix the label or drop the row"
            )
    if (bad := np.flatnonzero(link & _member(edges.get("train", np.zeros(0, np.int64)), keys))).size:
        pairs.refuse(
            bad[0],
            "labelled a link but it is a training edge: the model trains on it, so it cannot be "
            "evaluated; drop the row",
        )
    split = _eval_split_column(pairs)
    held = {s: _member(edges[s], keys) & link for s in EVAL_SPLITS if s in edges}
    if split is not None:
        for s, other in (("valid", "test"), ("test", "valid")):
            mine = split == EVAL_SPLITS.index(s)
            if other in held and (bad := np.flatnonzero(mine & held[other])).size:
                pairs.refuse(bad[0], f"marked {s} here but it is a {other} edge of the graph; keep it in {other}")
        if clash := _first_clash(keys, split):
            pairs.refuse(
                clash[1],
                f"in {EVAL_SPLITS[split[clash[1]]]} here and in {EVAL_SPLITS[split[clash[0]]]} in "
                f"data row {clash[0] + 1}; a pair evaluated in both would be selected on and "
                "reported at once: keep it in one split",
            )
    first = unique_first(keys)  # repeated rows count once
    if len(first) < len(keys):
        log.info("%s: %s repeated row(s) count once", path.name, f"{len(keys) - len(first):,}")
    keys, link = keys[first], link[first]
    split = (
        split[first]
        if split is not None
        else _assign(keys, {s: h[first] for s, h in held.items()}, seed, valid_share, path)
    )
    counts = []
    for i, s in enumerate(EVAL_SPLITS):
        pos, neg = keys[(split == i) & link], keys[(split == i) & ~link]
        if not len(neg):
            hint = "" if "split" in pairs.cols else " (or a split column)"
            raise DatasetError(
                f"--eval-pairs {path}: no non-link (label 0) is in {s}; the protocol {PAIRS} ranks "
                f"links against the split's non-links: add some{hint}"
            )
        target = ds.splits[s]
        target.neg[PAIRS] = _pairs_of(np.sort(neg), n)
        if len(pos):
            target.protocol_pos[PAIRS] = _pairs_of(np.sort(pos), n)
        counts.append(f"{s} {len(pos):,} links" if len(pos) else f"{s} its {len(target.pos):,} held-out links")
        counts[-1] += f" against {len(neg):,} non-links"
    ds.metric.setdefault(PAIRS, "mrr")
    log.info(
        "%s: evaluation pairs (protocol %s, beside the random negatives; --protocol %s alone): %s",
        path.name,
        PAIRS,
        PAIRS,
        "; ".join(counts),
    )


def _assign(keys: np.ndarray, held: dict, seed: int, valid_share: float, path: Path) -> np.ndarray:
    """Without a split column: held-out edges keep their split, the rest valid or test at random (seeded, in key
    order, so the assignment depends only on the set of pairs)."""
    out = np.where(held.get("test", np.zeros(len(keys), bool)), 1, 0).astype(np.int8)
    free = ~(held.get("valid", np.zeros(len(keys), bool)) | held.get("test", np.zeros(len(keys), bool)))
    order = np.flatnonzero(free)[np.argsort(keys[free], kind="stable")]
    out[order] = (np.random.default_rng([seed, 3]).random(len(order)) >= valid_share).astype(np.int8)
    log.info(
        "%s: no split column: %s pair(s) of held-out edges keep their split, %s go to valid or test at random "
        "(%.0f %% valid)",
        path.name,
        f"{int((~free).sum()):,}",
        f"{len(order):,}",
        100 * valid_share,
    )
    return out


# ---------------------------------------------------------------------------------- --train-negatives
def _attach_train_negatives(ds: LinkDataset, path: Path, edges: dict) -> None:
    pairs = _Pairs("--train-negatives", path, ds, optional=("label",))
    keys = pairs.keys
    if "label" in pairs.cols and (bad := np.flatnonzero(pairs.labels())).size:
        pairs.refuse(bad[0], "labelled 1 (a link); --train-negatives holds known non-links only")
    for s, e in edges.items():
        if (bad := np.flatnonzero(_member(e, keys))).size:
            pairs.refuse(bad[0], f"a known non-link here but a {s} edge of the graph; a pair is one or the other")
    user_eval = {
        s: _keys(ds.splits[s].neg[PAIRS], ds.num_nodes)
        for s in EVAL_SPLITS
        if s in ds.splits and PAIRS in ds.splits[s].neg
    }
    user_eval.update(
        {
            f"{s} link": _keys(ds.splits[s].protocol_pos[PAIRS], ds.num_nodes)
            for s in EVAL_SPLITS
            if s in ds.splits and PAIRS in ds.splits[s].protocol_pos
        }
    )
    for s, e in user_eval.items():
        if (bad := np.flatnonzero(_member(e, keys))).size:
            pairs.refuse(
                bad[0],
                f"also a {s} pair of --eval-pairs: training on it would leak its label into "
                "evaluation; keep it in one file",
            )
    keys = np.unique(keys)
    if len(keys) < len(pairs.keys):
        log.info("%s: %s repeated row(s) count once", path.name, f"{len(pairs.keys) - len(keys):,}")
    drawn = [
        _keys(a.reshape(-1, 2), ds.num_nodes)
        for s in EVAL_SPLITS
        if s in ds.splits
        for p, a in ds.splits[s].neg.items()
        if p != PAIRS
    ]
    if drawn and (hit := _member(np.unique(np.concatenate(drawn)), keys)).any():
        log.info(
            "%s: %s known non-link(s) are random evaluation negatives of the dataset: left out of training so "
            "evaluation stays unseen",
            path.name,
            f"{int(hit.sum()):,}",
        )
        keys = keys[~hit]
    ds.train_negatives = _pairs_of(keys, ds.num_nodes)
    log.info(
        "%s: %s known non-links join the training views (up to half of each view's negatives)",
        path.name,
        f"{len(keys):,}",
    )
