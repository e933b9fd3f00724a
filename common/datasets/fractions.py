"""`--split TRAIN,VALID,TEST`: the percentages of a seeded random edge split, parsed and checked once.

`python -m preprocess` and `python -m pipelines.run` share it. It applies to the datasets this project
splits itself (edge lists without a split column, cora); a dataset that ships its own split refuses it
(common.datasets.load_dataset), so a flag is never silently ignored. The default is HeaRT's 85/5/10.
"""
from __future__ import annotations

import math

from common.datasets.base import DatasetError

DEFAULT_SPLIT = (85.0, 5.0, 10.0)
_USAGE = ("expected three percentages train,valid,test, each above 0, that sum to 100 (e.g. 85,5,10)")


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
        raise DatasetError(f"--split {shown}: train must be above 0 (the model and the heuristics learn from it); "
                           "e.g. 85,5,10")
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


def split_fractions(split) -> tuple[float, float]:
    """(val_frac, test_frac) of a checked (train, valid, test) percentage triple."""
    _, valid, test = check_split(split)
    return valid / 100.0, test / 100.0


__all__ = ["DEFAULT_SPLIT", "check_split", "parse_split", "split_fractions"]
