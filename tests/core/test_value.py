"""The integer embedding of lexicographic values never reorders and never overflows int64."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tao_coordinator.core.value import LIMIT, EmbeddingOverflow, LexEmbedding, total

values = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 1), st.integers(0, 10**6), st.integers(0, 1)),
    min_size=1,
    max_size=40,
)


@given(values, st.data())
def test_sums_of_any_two_subsets_compare_like_their_tuples(items, data):
    try:
        embedding = LexEmbedding.for_items(([v] for v in items), 4)
    except EmbeddingOverflow:
        return
    a = data.draw(st.lists(st.booleans(), min_size=len(items), max_size=len(items)))
    b = data.draw(st.lists(st.booleans(), min_size=len(items), max_size=len(items)))
    sum_a = total((v for v, keep in zip(items, a, strict=True) if keep), 4)
    sum_b = total((v for v, keep in zip(items, b, strict=True) if keep), 4)
    ea, eb = embedding.embed(sum_a), embedding.embed(sum_b)
    assert (sum_a < sum_b) == (ea < eb)
    assert (sum_a == sum_b) == (ea == eb)
    assert ea == sum(embedding.embed(v) for v, keep in zip(items, a, strict=True) if keep)


@given(values)
def test_the_largest_sum_stays_below_the_limit_in_int64(items):
    try:
        embedding = LexEmbedding.for_items(([v] for v in items), 4)
    except EmbeddingOverflow:
        return
    everything = total(items, 4)
    assert embedding.embed(everything) <= embedding.largest < LIMIT
    # an int64 sentinel of -2^62 plus the largest sum is still representable and still negative (what LIMIT is for)
    assert np.int64(-(1 << 62)) + np.int64(embedding.largest) < 0


def test_overflow_is_detected_not_wrapped():
    huge = [(10**9, 1, 10**9, 1)] * 50
    with pytest.raises(EmbeddingOverflow):
        LexEmbedding.for_items(([v] for v in huge), 4)


def test_negative_components_are_rejected():
    with pytest.raises(ValueError, match="non-negative"):
        LexEmbedding.for_items([[(1, -1)]], 2)
