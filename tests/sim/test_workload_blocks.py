from hypothesis import given
from hypothesis import strategies as st

from tao_coordinator.core.model import shared_prefix_blocks
from tao_coordinator.sim.prompt import Prompt, runs_from_ids
from tao_coordinator.sim.workloads.blocks import (
    AGENTX,
    MAX_LOCAL,
    MAX_SLOT,
    SYNTHETIC,
    merge_runs,
    namespace_base,
    namespace_runs,
    output_block_runs,
    slice_runs,
)

ids_lists = st.lists(st.integers(min_value=0, max_value=60), max_size=40)


def expand(runs):
    return list(Prompt(0, tuple(runs)).block_ids())


def test_largest_id_fits_a_signed_64_bit_integer():
    largest = namespace_base(127, MAX_SLOT) + MAX_LOCAL - 1
    assert largest == 2**63 - 1


def test_slots_and_sources_do_not_overlap():
    first_trace = namespace_base(AGENTX, 1)
    assert first_trace + MAX_LOCAL == namespace_base(AGENTX, 2)
    assert namespace_base(AGENTX, MAX_SLOT) + MAX_LOCAL <= namespace_base(AGENTX + 1, 0)
    assert namespace_base(SYNTHETIC, 0) != namespace_base(AGENTX, 0)


@given(ids_lists)
def test_trace_blocks_become_four_consecutive_node_blocks(trace_ids):
    base = namespace_base(AGENTX, 7)
    node = namespace_runs(runs_from_ids(trace_ids), base, scale=4)
    assert expand(node) == [base + 4 * h + k for h in trace_ids for k in range(4)]
    assert node == runs_from_ids(expand(node))


def test_namespace_runs_refuses_ids_that_would_reach_the_slot_bits():
    try:
        namespace_runs([(MAX_LOCAL // 4 - 1, 2)], namespace_base(AGENTX, 1), scale=4)
    except ValueError:
        return
    raise AssertionError("an overflowing run was accepted")


@given(ids_lists, ids_lists)
def test_shared_prefix_blocks_counts_equal_leading_ids(a, b):
    expected = 0
    while expected < min(len(a), len(b)) and a[expected] == b[expected]:
        expected += 1
    assert shared_prefix_blocks(runs_from_ids(a), runs_from_ids(b)) == expected


@given(ids_lists, st.integers(0, 50), st.integers(0, 50))
def test_slice_runs_equals_slicing_the_expanded_ids(ids, start, stop):
    assert expand(slice_runs(runs_from_ids(ids), start, stop)) == ids[start:stop]


def test_merge_runs_joins_adjacent_runs():
    assert merge_runs([(1, 3), (4, 2), (9, 1)]) == ((1, 5), (9, 1))


def test_output_blocks_are_the_next_prompt_blocks_up_to_the_end_of_the_answer():
    prompt = ((100, 10),)
    next_prompt = ((100, 12), (500, 6))
    # 160 prompt tokens + 40 output tokens = 200 tokens of KV: 12 full blocks, so blocks 10 and 11 are new.
    assert output_block_runs(prompt, 200, next_prompt) == ((110, 2),)
    assert output_block_runs(prompt, 191, next_prompt) == ((110, 1),)
    assert output_block_runs(prompt, 10_000, next_prompt) == ((110, 2), (500, 6))
    assert output_block_runs(prompt, 200, ((100, 9), (7, 5))) == ()
