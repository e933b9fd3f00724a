"""`--split [random|temporal][,TRAIN,VALID,TEST]`: how an edge list is split and the percentages, parsed once.

`python -m preprocess` and `python -m pipelines.run` share it. It applies to the datasets this project
splits itself (edge lists without a split column, cora); a dataset that ships its own split refuses it
(common.datasets.load_dataset), so a flag is never silently ignored. The default is HeaRT's 85/5/10.
The kind: `temporal` orders pairs by an edge list's `time` column (common/datasets/temporal.py) and is the
default when the file has one; `random` is the seeded random split, the default otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from common.datasets.base import DatasetError

DEFAULT_SPLIT = (85.0, 5.0, 10.0)
# The default split's held-out edges at most (a 200,000-edge graph's 5 % and 10 %): every candidate of the search
# scores validation at every epoch, and every seed scores test, so past these they cost more than training, while
# an MRR's SE is already at most 0.005 and 0.0035 (a reciprocal rank in [0, 1] has an SD of at most 0.5). The
# edges above them train. Set at the command line (common.datasets.spec.held_out_caps).
DEFAULT_VALID_MAX, DEFAULT_TEST_MAX = 10_000, 20_000
SPLIT_KINDS = ("random", "temporal")


@dataclass(frozen=True)
class SplitSettings:
    """How a dataset this project splits itself is split: the valid and test shares, the seed of the split and
    its negatives, the name errors and logs give the input (where; default: the dataset's name), and the
    command's shares flag for the fix of a split too small (split_flag; None: the command has none); valid_max,
    test_max: the most validation and test edges (None: the share's all; the rest train)."""

    val_frac: float = 0.05
    test_frac: float = 0.10
    seed: int = 0
    where: str = ""
    split_flag: str | None = "--split"
    valid_max: int | None = None
    test_max: int | None = None


_USAGE = "expected three percentages train,valid,test, each above 0, that sum to 100 (e.g. 85,5,10)"


def check_split(values) -> tuple[float, float, float]:
    """(train, valid, test) percentages as floats, or a DatasetError naming --split."""
    try:
        split = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise DatasetError(f"--split: {_USAGE}, got {values!r}") from None
    shown = ",".join(f"{v:g}" for v in split)
    if len(split) != 3 or not all(math.isfinite(v) and v >= 0 for v in split):
        raise DatasetError(f"--split: {_USAGE}, got {shown!r}")
    if abs(sum(split) - 100.0) > 1e-6:
        raise DatasetError(f"--split {shown}: the percentages sum to {sum(split):g}, not 100; e.g. 85,5,10")
    if split[1] <= 0 or split[2] <= 0:
        raise DatasetError(f"--split {shown}: valid and test must be above 0 (selection and the report need both)")
    if split[0] <= 0:
        raise DatasetError(
            f"--split {shown}: train must be above 0 (the model and the heuristics learn from it); e.g. 85,5,10"
        )
    return split


def parse_split(text: str) -> tuple[float, float, float]:
    """'85,5,10' -> (85.0, 5.0, 10.0), checked."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise DatasetError(f"--split: {_USAGE}, got {text!r}") from None
    if len(values) != 3:
        raise DatasetError(f"--split: {_USAGE}, got {text!r}")
    return check_split(values)


def parse_split_spec(text: str) -> tuple[str | None, tuple[float, float, float] | None]:
    """'random' -> ('random', None); 'temporal,80,10,10' -> ('temporal', (80, 10, 10)); '85,5,10' -> (None, ...):
    the kind (None = the data's default) and the percentages (None = 85,5,10), checked."""
    parts = [p.strip() for p in str(text).split(",")]
    kind = parts[0].lower() if parts and parts[0].lower() in SPLIT_KINDS else None
    if kind is not None:
        parts = parts[1:]
        if not parts:
            return kind, None
    elif parts and parts[0] and not parts[0].lstrip("+-").replace(".", "", 1).isdigit():
        raise DatasetError(
            f"--split: unknown kind {parts[0]!r}; use random or temporal, optionally followed by the "
            f"percentages (e.g. temporal,80,10,10), or only the percentages"
        )
    return kind, parse_split(",".join(parts))


def split_fractions(split) -> tuple[float, float]:
    """(val_frac, test_frac) of a checked (train, valid, test) percentage triple."""
    _, valid, test = check_split(split)
    return valid / 100.0, test / 100.0


__all__ = [
    "DEFAULT_SPLIT",
    "DEFAULT_TEST_MAX",
    "DEFAULT_VALID_MAX",
    "SPLIT_KINDS",
    "check_split",
    "parse_split",
    "parse_split_spec",
    "split_fractions",
]


def shares_fix(num: int, flag: str | None = "--split") -> str:
    """The fix for `num` edges (or pairs) too few for one valid and one test at the shares asked: a --split value
    whose valid and test shares hold one each (one `flag`, the command's shares flag, accepts), or, for a command
    without one (None), a split column; or more edges."""
    share = max(15, math.ceil(100 / max(num, 1)) + 1)  # +1: floor(share% of num) >= 1 whatever the rounding
    column = "give the file a split column (train, valid or test on every row)"
    if 100 - 2 * share <= 0:
        return f"add edges ({num} cannot make a train, a valid and a test edge)"
    if flag is None:
        return f"{column}, or add edges"
    return f"pass {flag} {100 - 2 * share},{share},{share}, or add edges"
