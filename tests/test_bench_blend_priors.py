"""bench.blend_priors: the typed blend's decision without and with the l3 prior, on a hand-made validation set."""

from __future__ import annotations

import numpy as np
import pytest

from bench.blend_priors import compare
from common.datasets.kg import KG, triples_dataset
from common.datasets.kinds import NodeKinds
from tests.test_typed_search import typed_set


def shop():
    """Users 0-4, items 5-10, every item rated twice in training (popularity ties them all). Valid: user 0 rates item
    7 against item 10, user 2 item 10 against 7. 0's items 5 and 6 were both rated by user 1, who rated 7: two walks
    0-5-1-7 and 0-6-1-7, none to 10 (its raters 3 and 4 share no item with 0); the mirror image for user 2."""
    rated = {0: (5, 6), 1: (5, 6, 7), 2: (8, 9), 3: (8, 9, 10), 4: (7, 10)}
    train = np.array([[u, 0, i] for u, items in rated.items() for i in items])
    triples = {"train": train, "valid": np.array([[0, 0, 7], [2, 0, 10]]), "test": np.array([[4, 0, 5]])}
    kinds = NodeKinds(("user", "item"), np.array([0] * 5 + [1] * 6, np.int32))
    ds = triples_dataset("shop", triples, 11, ("user->item",), 0, kinds=kinds)
    ds.splits["valid"].neg[KG] = np.array([[[0, 10]], [[2, 7]]])
    ds.splits["test"].neg[KG] = np.array([[[4, 8]]])
    return ds


def test_where_only_the_walks_tell_the_items_apart_the_l3_prior_is_added(tmp_path):
    view = shop().without_test()
    manifest = typed_set(shop(), tmp_path)
    logits = {"0": (np.arange(4), np.zeros(4, np.float32))}  # each positive ties its corruption for the model
    c = compare(view, manifest, logits)
    # before: the popularity prior ties them too, so the model stays alone (rank 1.5 of 2: RR 2/3, ties averaged)
    assert c["before"].key == "none" and c["first"].tolist() == pytest.approx([2 / 3, 2 / 3])
    # with l3: 2 walks against none puts each positive first, at the smallest weight (SE 0)
    assert c["after"].key == "l3 prior x 0.25" and c["second"].tolist() == [1.0, 1.0]
    assert c["alone"].tolist() == pytest.approx([2 / 3, 2 / 3])
