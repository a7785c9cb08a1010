"""The KV block pool: allocation order, tail-first release, LRU eviction, conservation."""

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine.cache.kv import BlockPool


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
    pool.pin_all([hit])
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
                pool.pin_all([block])
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
    pool.pin_all([own[0]])
    pool.check()


class _ModelPool:
    """The pool's rules written plainly: one list in LRU order, a list of copies per key."""

    def __init__(self, num_blocks, caching=True):
        self.caching = caching
        self.anonymous = num_blocks
        self.active = 0
        self.lru = []  # free blocks, least recently released first; "gap" for private content
        self.copies = {}  # key -> resident copies, oldest first

    def lookup(self, key):
        copies = self.copies.get(key)
        return copies[0] if copies else None

    def allocate(self, count):
        if count > self.anonymous + len(self.lru):
            return False
        self.active += count
        take = min(count, self.anonymous)
        self.anonymous -= take
        for _ in range(count - take):
            block = self.lru.pop(0)
            if isinstance(block, _ModelBlock):
                if block.key is None:
                    block.refs = -1
                else:
                    self.copies[block.key].remove(block)
        return True

    def store(self, key):
        block = _ModelBlock(key, 1)
        self.copies.setdefault(key, []).append(block)
        return block

    def pin(self, block):
        if block.refs == 0:
            self.lru.remove(block)
            self.active += 1
        block.refs += 1

    def release(self, lease, complete, keep_private=False):
        own = []
        for index in range(len(lease) - 1, -1, -1):
            block = lease[index]
            if block is None:
                self.active -= 1
                if index >= complete or not self.caching:
                    self.anonymous += 1
                    continue
                block = _ModelBlock(None, 0)
            else:
                block.refs -= 1
                if block.refs:
                    continue
                self.active -= 1
                if block.key is not None and not self.caching:
                    self.copies[block.key].remove(block)
                    self.anonymous += 1
                    continue
            if block.key is None and not keep_private:
                block = "gap"
            elif block.key is None:
                own.append(block)
            self.lru.append(block)
        return own[::-1]


class _ModelBlock:
    def __init__(self, key, refs):
        self.key, self.refs = key, refs


@settings(max_examples=400, deadline=None)
@given(st.booleans(), st.lists(st.tuples(st.sampled_from(["alloc", "store", "release", "preempt", "pin", "hit", "reuse"]),
                                         st.integers(0, 6), st.integers(0, 9)), min_size=20, max_size=100))
def test_the_pool_follows_the_plain_model(caching, ops):
    """Same operations on the pool and on the plain model: the same hits, the same free
    counts and the same survivors of every eviction (which checks the LRU order exactly)."""
    pool, model = BlockPool(10, caching), _ModelPool(10, caching)
    pool._compact_at = 3  # drop stale LRU entries often
    twin = {}  # id(pool block) -> model block
    leases = []  # (pool lease, model lease)
    own = []  # (pool blocks, model blocks) kept by preempted requests
    for op, n, key in ops:
        if op == "alloc" and pool.allocate(n) == model.allocate(n) is True:
            leases.append(([None] * n, [None] * n))
        elif op == "store" and leases:
            real, plain = leases[n % len(leases)]
            first = key % (len(real) + 1)
            keys = [key * 7 + i * (n % 2) for i in range(len(real))]  # n even: one key repeated
            pool.store_completed(keys, real, first, len(real))
            for i in range(first, len(plain)):
                if plain[i] is None:
                    plain[i] = model.store(keys[i])
                    twin[id(real[i])] = plain[i]
        elif op in ("release", "preempt") and leases:
            real, plain = leases.pop(n % len(leases))
            complete = len(real) - key % 2
            kept = pool.release(real, complete, keep_private=op == "preempt", private_from=key)
            kept_plain = model.release(plain, complete, keep_private=op == "preempt")
            assert len(kept) == len(kept_plain)
            twin.update(zip(map(id, kept), kept_plain, strict=True))
            own.append((kept, kept_plain))
        elif op == "pin":  # one block, often in the middle of a span
            key = key * 7 + n % 4
            block, plain = pool.lookup(key), model.lookup(key)
            assert (block is None) == (plain is None) and (block is None or twin[id(block)] is plain)
            if block is not None:
                pool.pin_all([block])
                model.pin(plain)
                leases.append(([block], [plain]))
        elif op == "hit":  # a request's cached prefix: spans pinned whole, in part, or several at once
            keys = [key * 7 + i for i in range(n + 1)]
            hits = pool.prefix_hits(keys, len(keys) - key % 2)
            plain = []
            for k in keys[:len(keys) - key % 2] if caching else []:
                block = model.lookup(k)
                if block is None:
                    break
                plain.append(block)
            assert [twin[id(b)] for b in hits] == plain
            assert pool.held_count(hits) == sum(1 for b in plain if b.refs > 0)
            pool.pin_all(hits)
            for block in plain:
                model.pin(block)
            tail = key % 3  # then its private blocks
            fits = pool.allocate(tail)
            assert fits == model.allocate(tail)
            tail = tail if fits else 0
            leases.append((hits + [None] * tail, plain + [None] * tail))
        elif op == "reuse" and own:
            kept, kept_plain = own.pop(n % len(own))
            live = [b for b in kept if b.refs >= 0]
            assert [twin[id(b)] for b in live] == [b for b in kept_plain if b.refs >= 0]
            pool.pin_all(live)
            for b in live:
                model.pin(twin[id(b)])
            leases.append((live, [twin[id(b)] for b in live]))
        pool.check()
        assert (pool.free_blocks, pool.active_blocks) == (model.anonymous + len(model.lru), model.active)
        for k in range(80):
            block, plain = pool.lookup(k), model.lookup(k)
            assert (block is None) == (plain is None) and (block is None or twin[id(block)] is plain)


def test_a_revived_private_block_loses_its_old_lru_place():
    """A resumed request takes back its kept block (out of the LRU); when it finishes, the
    block is free again only at the LRU tail, so the next eviction takes the block before it."""
    pool = BlockPool(3)
    assert pool.allocate(1)
    own = pool.release([None], 1, keep_private=True)  # preempted: LRU [own]
    assert pool.allocate(1)
    pool.release([pool.store(7)], 1)  # LRU [own, 7]
    pool.pin_all(own)  # resumed: LRU [7]
    pool.release(own, 1)  # finished: LRU [7, private]
    pool.check()
    assert pool.allocate(2) and pool.lookup(7) is None, "one anonymous block, then the LRU head"
    assert pool.free_blocks == 1
    pool.check()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2), st.integers(1, 9), st.integers(0, 9)),
                min_size=5, max_size=60))
def test_requests_sharing_prefixes_follow_the_plain_model(ops):
    """Requests as an engine makes them (look up the cached prefix, pin it, allocate the rest,
    cache what they compute, release in any order): prefixes of one chain pin spans whole, in
    part, or several at once, and free spans are split and evicted from their last block down."""
    pool, model = BlockPool(16), _ModelPool(16)
    pool._compact_at = 4  # drop stale LRU entries often
    twin = {}
    leases = []
    for start, chain, length, pick in ops:
        if not start and leases:
            real, plain, computed = leases.pop(pick % len(leases))
            pool.release(real, computed, private_from=length if pick % 2 else len(real))
            model.release(plain, computed)
        else:
            keys = [chain * 100 + i for i in range(length)]
            limit = length - pick % 2
            hits = pool.prefix_hits(keys, limit)
            plain = []
            while len(plain) < limit and model.lookup(keys[len(plain)]) is not None:
                plain.append(model.lookup(keys[len(plain)]))
            assert [twin[id(b)] for b in hits] == plain
            assert pool.held_count(hits) == sum(1 for b in plain if b.refs > 0)
            pool.pin_all(hits)
            for block in plain:
                model.pin(block)
            fresh = length - len(hits)
            fits = pool.allocate(fresh)
            assert fits == model.allocate(fresh)
            if not fits:  # blocked: let the hits go again
                pool.release(hits, len(hits), keep_private=True)
                model.release(plain, len(plain), keep_private=True)
            else:
                real, plain = hits + [None] * fresh, plain + [None] * fresh
                stop = max(len(hits), length - pick % 3)  # the blocks it computed in full
                pool.store_completed(keys, real, len(hits), stop)
                for i in range(len(hits), stop):
                    plain[i] = model.store(keys[i])
                    twin[id(real[i])] = plain[i]
                leases.append((real, plain, stop))
        pool.check()
        assert (pool.free_blocks, pool.active_blocks) == (model.anonymous + len(model.lru), model.active)
        for k in [c * 100 + i for c in range(3) for i in range(9)]:
            block, plain_block = pool.lookup(k), model.lookup(k)
            assert (block is None) == (plain_block is None)
            assert block is None or twin[id(block)] is plain_block


def test_pinning_the_middle_of_a_free_span_keeps_the_eviction_order_of_the_rest():
    pool = BlockPool(4)
    assert pool.allocate(4)
    lease = [None] * 4
    pool.store_completed([1, 2, 3, 4], lease, 0, 4)
    pool.release(lease, 4)  # LRU: 4, 3, 2, 1 (one span, evicted from its last block down)
    middle = pool.lookup(2)
    pool.pin_all([middle])  # splits the span: [1] free, [2] held, [3, 4] free
    pool.check()
    gone = []
    for _ in range(3):
        assert pool.allocate(1)
        gone.append(next(k for k in (1, 3, 4) if k not in gone and pool.lookup(k) is None))
        pool.check()
    assert gone == [4, 3, 1] and pool.lookup(2) is middle
    pool.release([middle], 1)
    assert pool.free_blocks == 1 and pool.allocate(1) and pool.lookup(2) is None
    pool.check()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 2), min_size=1, max_size=12),
                          st.integers(0, 12)), min_size=5, max_size=50))
def test_prefix_hits_equal_one_lookup_per_key(ops):
    """Chains branching at any block (so a lookup can leave a stored span in its middle),
    released, evicted and stored again: `prefix_hits` (a span at a time while no key has two
    copies) finds exactly the blocks of a lookup per key."""
    pool = BlockPool(24)
    pool._compact_at = 4
    leases = []
    for action, path, cut in ops:
        if action == 0 and leases:
            lease, computed = leases.pop(cut % len(leases))
            pool.release(lease, computed)
            continue
        keys = [hash(tuple(path[:i + 1])) for i in range(len(path))]
        limit = len(keys) - cut % 2
        hits = pool.prefix_hits(keys, limit)
        plain = []
        for key in keys[:limit]:
            block = pool.lookup(key)
            if block is None:
                break
            plain.append(block)
        assert hits == plain
        if action == 1:  # a lookup only
            continue
        pool.pin_all(hits)
        fresh = len(keys) - len(hits)
        if not pool.allocate(fresh):
            pool.release(hits, len(hits))
            continue
        lease = hits + [None] * fresh
        stop = max(len(hits), len(keys) - cut % 3)
        pool.store_completed(keys, lease, len(hits), stop)
        leases.append((lease, stop))
        pool.check()
