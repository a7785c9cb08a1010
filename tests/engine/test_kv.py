"""The KV block pool: allocation order, tail-first release, LRU eviction, conservation."""

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.kv import BlockPool


def _hold(pool, keys):
    """Allocate one block per key and cache each; returns the lease."""
    assert pool.allocate(len(keys))
    return [pool.store(k) for k in keys]


def test_anonymous_capacity_is_used_before_eviction():
    pool = BlockPool(6)
    lease = _hold(pool, [1, 2, 3])
    pool.release(lease, len(lease))
    assert pool.active_blocks == 0 and pool.anonymous_blocks == 3 and pool.free_blocks == 6
    assert pool.allocate(3)
    assert all(pool.lookup(k) is not None for k in (1, 2, 3)), "nothing evicted yet"
    assert pool.allocate(1)
    assert pool.lookup(3) is None, "released tail-first, so the last block is the LRU head"
    assert pool.lookup(1) is not None and pool.lookup(2) is not None
    pool.check()


def test_pinning_revives_a_free_block_and_protects_it():
    pool = BlockPool(3)
    pool.release(_hold(pool, [1, 2, 3]), 3)
    hit = pool.lookup(1)
    pool.pin(hit)
    assert pool.active_blocks == 1
    assert pool.allocate(2)
    assert pool.lookup(1) is hit
    assert not pool.allocate(1), "nothing left: 1 pinned + 2 private"
    pool.check()


def test_duplicate_copies_keep_the_oldest_for_lookups():
    pool = BlockPool(4)
    first = _hold(pool, [9])
    second = _hold(pool, [9])
    assert pool.lookup(9) is first[0]
    pool.release(first, 1)  # oldest copy now free cached, the LRU head
    assert pool.allocate(3)  # 2 anonymous + evicts the free copy
    assert pool.lookup(9) is second[0], "the surviving copy takes over"
    pool.check()


def test_without_caching_released_blocks_return_to_anonymous():
    pool = BlockPool(4, caching=False)
    assert pool.allocate(4)
    pool.release([None] * 4, 4)
    assert pool.anonymous_blocks == 4 and pool.active_blocks == 0
    pool.check()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alloc", "release", "pin"]), st.integers(0, 5), st.integers(0, 7)),
                max_size=60))
def test_blocks_are_conserved(ops):
    pool = BlockPool(12)
    leases = []
    for op, n, key in ops:
        if op == "alloc":
            if pool.allocate(n):
                lease = [None] * n
                for i in range(min(n, 2)):
                    lease[i] = pool.store(key + i)
                leases.append(lease)
        elif op == "release" and leases:
            lease = leases.pop(n % len(leases))
            pool.release(lease, len(lease) - key % 2, keep_private=bool(key % 3))
        elif op == "pin":
            block = pool.lookup(key)
            if block is not None:
                pool.pin(block)
                leases.append([block])
        pool.check()
    for lease in leases:
        pool.release(lease, len(lease))
    pool.check()
    assert pool.active_blocks == 0 and pool.free_blocks == 12


def test_private_blocks_keep_their_lru_place_without_keys():
    pool = BlockPool(8)
    assert pool.allocate(3)
    shared = pool.store(5)
    lease = [shared, None, None]  # block 0 shareable, blocks 1-2 private to the request
    pool.release(lease, 3)
    assert pool.active_blocks == 0 and pool.free_blocks == 8
    assert pool.allocate(5 + 2), "anonymous first, then the two private blocks (released first)"
    assert pool.lookup(5) is shared
    assert pool.allocate(1) and pool.lookup(5) is None
    pool.check()


def test_a_preempted_request_keeps_handles_on_its_private_blocks():
    pool = BlockPool(4)
    assert pool.allocate(3)
    own = pool.release([None, None, None], 2, keep_private=True)
    assert len(own) == 2 and all(b.refs == 0 and b.key is None for b in own)
    assert pool.anonymous_blocks == 2, "the partial third block is plain free capacity"
    assert pool.allocate(3)
    assert own[1].refs == -1 and own[0].refs == 0, "released tail-first, so the later block goes first"
    pool.pin(own[0])
    pool.check()
