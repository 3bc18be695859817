"""Block pool: prefix lookup, LRU eviction order, hits on free blocks, private duplicates, reset."""

from tao_coordinator.sim.node.block_pool import BlockPool, HeldRun


def hold(pool: BlockPool, first: int, count: int) -> list[HeldRun]:
    """Allocate and commit a fresh run, as a request's prefill would."""
    pool.allocate(count)
    return pool.commit([(first, count)], previous_id=None)


def test_match_walks_runs_and_stops_at_the_first_miss():
    pool = BlockPool(num_gpu_blocks=33)
    pool.release(hold(pool, 100, 10), uncommitted=0)
    pool.release(hold(pool, 500, 5), uncommitted=0)
    assert pool.match([(100, 10), (500, 5)], limit=100).blocks == 15
    assert pool.match([(100, 4), (500, 5)], limit=100).blocks == 9  # a prefix of the first run, then the second
    assert pool.match([(100, 10), (700, 3), (500, 5)], limit=100).blocks == 10  # 700 misses: 500 is not reached
    assert pool.match([(101, 9)], limit=100).blocks == 9
    assert pool.match([(100, 10)], limit=7) == pool.match([(100, 7)], limit=100)
    pool.check_invariants()


def test_match_counts_free_blocks_as_evictable_and_held_ones_not():
    pool = BlockPool(num_gpu_blocks=33)
    held = hold(pool, 0, 8)
    assert pool.match([(0, 8)], limit=8).evictable == 0
    pool.release(held, uncommitted=0)
    assert pool.match([(0, 8)], limit=8).evictable == 8


def test_eviction_is_lru_deepest_block_of_a_freed_request_first():
    pool = BlockPool(num_gpu_blocks=9)  # 8 usable blocks
    first = hold(pool, 10, 4)
    second = hold(pool, 20, 4)
    pool.release(first, uncommitted=0)
    pool.release(second, uncommitted=0)
    assert pool.free_blocks == 8 and pool.cached_blocks == 8
    assert pool.allocate(3) == [(11, 3)]  # ids 13, 12, 11 go first; the root 10 survives
    assert pool.allocate(2) == [(10, 1), (23, 1)]  # then the older request's root, then the newer one's deepest
    assert pool.match([(20, 4)], limit=4).blocks == 3
    pool.check_invariants()


def test_unused_and_uncommitted_blocks_are_handed_out_before_cached_ones():
    pool = BlockPool(num_gpu_blocks=11)
    held = hold(pool, 0, 4)
    pool.allocate(1)  # a partial last block, never committed
    pool.release(held, uncommitted=1)
    assert pool.allocate(6) == []  # 5 never-used + 1 partial block
    assert pool.allocate(1) == [(3, 1)]


def test_a_hit_takes_free_blocks_out_of_the_lru_list_so_they_survive():
    pool = BlockPool(num_gpu_blocks=9)
    old = hold(pool, 10, 4)
    new = hold(pool, 20, 4)
    pool.release(old, uncommitted=0)
    pool.release(new, uncommitted=0)
    pool.acquire([(10, 2)])  # a new request hits the old prefix
    assert pool.free_blocks == 6
    assert pool.allocate(6) == [(12, 2), (20, 4)]  # the hit blocks are untouchable while held
    assert pool.match([(10, 4)], limit=4).blocks == 2
    pool.check_invariants()


def test_released_hit_blocks_go_to_the_tail_and_become_the_most_recent():
    pool = BlockPool(num_gpu_blocks=9)
    old = hold(pool, 10, 4)
    new = hold(pool, 20, 4)
    pool.release(old, uncommitted=0)
    pool.release(new, uncommitted=0)
    pool.acquire([(10, 4)])
    pool.release([HeldRun(10, 4, private=False)], uncommitted=0)
    assert pool.allocate(5) == [(20, 4), (13, 1)]


def test_shared_blocks_need_every_holder_to_release_them():
    pool = BlockPool(num_gpu_blocks=9)
    first = hold(pool, 0, 4)
    pool.acquire([(0, 3)])
    pool.release(first, uncommitted=0)
    assert pool.used_blocks == 3 and pool.free_blocks == 5
    pool.release([HeldRun(0, 3, private=False)], uncommitted=0)
    assert pool.used_blocks == 0
    pool.check_invariants()


def test_committing_an_indexed_id_makes_a_private_copy_returned_uncached():
    pool = BlockPool(num_gpu_blocks=17)
    first = hold(pool, 0, 4)
    pool.allocate(6)
    second = pool.commit([(0, 6)], previous_id=None)
    assert [(p.first, p.count, p.private) for p in second] == [(0, 4, True), (4, 2, False)]
    assert pool.cached_blocks == 6 and pool.used_blocks == 10
    pool.release(second, uncommitted=0)
    pool.release(first, uncommitted=0)
    assert pool.allocate(10) == []  # 6 never used + the 4 private copies
    pool.check_invariants()


def test_commit_extends_a_segment_only_this_request_holds():
    pool = BlockPool(num_gpu_blocks=17)
    held = hold(pool, 0, 4)
    pool.allocate(2)
    held += pool.commit([(4, 2)], previous_id=3)
    assert pool.cached_runs() == [(0, 6)]
    pool.release(held, uncommitted=0)
    assert pool.allocate(12) == [(4, 2)]  # 10 never-used blocks, then ids 5 and 4


def test_reset_is_refused_while_blocks_are_held():
    pool = BlockPool(num_gpu_blocks=9)
    held = hold(pool, 0, 2)
    assert not pool.reset()
    pool.release(held, uncommitted=0)
    assert pool.reset()
    assert pool.cached_blocks == 0 and pool.free_blocks == 8
    assert pool.match([(0, 2)], limit=2).blocks == 0
