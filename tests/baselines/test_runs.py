"""Block-id run sets against a plain set of ids: union, difference, prefix match, LRU trimming."""

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from tao_coordinator.baselines.runs import RunSet, union_size

runs_strategy = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12)), max_size=4)
ops_strategy = st.lists(st.tuples(st.sampled_from(["add", "discard"]), runs_strategy), max_size=25)


def _ids(runs):
    return {first + k for first, count in runs for k in range(count)}


def _check(index: RunSet, model: set[int]) -> None:
    segments = index.segments()
    ids = {k for start, end, _ in segments for k in range(start, end)}
    assert ids == model
    assert index.size == len(model)
    assert all(a[1] <= b[0] for a, b in pairwise(segments))


@given(ops_strategy)
def test_add_and_discard_match_a_plain_set(ops):
    index, model = RunSet(lru=True), set()
    for stamp, (op, runs) in enumerate(ops):
        if op == "add":
            index.add(runs, stamp)
            model |= _ids(runs)
        else:
            index.discard(runs)
            model -= _ids(runs)
        _check(index, model)


@given(ops_strategy, runs_strategy)
def test_prefix_counts_leading_ids_until_the_first_miss(ops, query):
    index, model = RunSet(), set()
    for op, runs in ops:
        (index.add if op == "add" else index.discard)(runs)
        model = model | _ids(runs) if op == "add" else model - _ids(runs)
    expected = 0
    for block in (first + k for first, count in query for k in range(count)):
        if block not in model:
            break
        expected += 1
    assert index.prefix(query) == expected


def test_eviction_trims_the_least_recently_used_segment_from_its_end():
    index = RunSet(lru=True)
    index.touch([(0, 10)], stamp=1)  # an old session's path
    index.touch([(100, 10)], stamp=2)
    index.touch([(0, 4)], stamp=3)  # the old session's head was used again
    assert index.evict_to(12) == 8
    assert index.segments() == [(0, 4, 3), (100, 108, 2)]  # stamp 1 goes first, then stamp 2 from its end
    assert index.prefix([(0, 10)]) == 4


def test_union_size_counts_shared_ids_once():
    assert union_size([[(0, 10)], [(5, 10)], [(40, 2)]]) == 17
    assert union_size([]) == 0
