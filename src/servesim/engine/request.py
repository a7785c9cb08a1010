"""The per-request state a scheduler rank keeps."""

from __future__ import annotations

from servesim.engine.cache.blocks import RANGE_KEYS, ROOT_KEY, chain_keys, window_start
from servesim.engine.cache.kv import Block
from servesim.engine.cache.shared import Transfer
from servesim.traffic.workload import Prompt, Run, expand_hash_ids, output_runs


class EngineRequest:
    """One request inside a rank: its tokens, progress and KV lease.

    Progress follows one invariant: ``computed`` tokens have KV; the known sequence is
    ``prompt_len + generated`` tokens. A decoding request always has exactly one token (the
    last sampled one) not yet computed.
    """

    __slots__ = (
        "rid", "prompt_len", "max_output", "_prompt", "output_base", "output_ids",
        "keys", "generated", "computed", "lease", "preempted", "token_spans", "admissions",
        "order", "anchor", "epoch", "shared_blocks", "own_blocks", "reject_reason",
        "prebuilt", "reserve_attempt", "host_load", "g3_restore", "store_due",
    )

    def __init__(self, rid: int, prompt_runs: Prompt, prompt_len: int, max_output: int,
                 output_base: int, output_ids: list[int] | None = None,
                 unique_from: int = 1 << 62, block_size: int = 1) -> None:
        self.rid = rid
        self.prompt_len = prompt_len
        self.max_output = max_output
        self._prompt = prompt_runs
        self.output_base = output_base
        self.output_ids = output_ids
        self.keys: list[int] = []
        """Chained keys of the leading full blocks of the known sequence, as far as needed."""
        self.generated = 0
        self.computed = 0
        self.lease: list[Block | None] = []
        """One entry per held block: a cached Block, or None for a private block."""
        self.preempted = False
        self.token_spans: list[int] = []
        """Flat [first, end) pass-index ranges of the worker passes that gave this request a token."""
        self.admissions = 0
        self.order = 0
        """Position in the rank's running order (admission counter)."""
        self.anchor = -1
        """While in a rank's decode cohort: the pass from which it gains one token per pass;
        `computed` and `generated` are the values at the start of that pass."""
        self.epoch = 0
        """Bumped whenever cohort bookkeeping for this request becomes stale."""
        self.shared_blocks = unique_from // block_size
        """Leading full blocks whose content another request could also have; later blocks
        contain a token no other request has, so they are never looked up by content."""
        self.own_blocks: list[Block] = []
        """After a preemption: this request's freed private blocks, from `shared_blocks` on."""
        self.reject_reason: str | None = None
        """Why servesim rejected a request the reference would abort the whole run on."""
        self.prebuilt = False
        """Decode role: its prompt's KV arrived from a prefill worker; not yet admitted."""
        self.reserve_attempt = -1
        """Decode role: the capacity generation of the last failed reservation attempt."""
        self.host_load: tuple[Transfer, int, int] | None = None
        """With a host KV tier: (its load from host memory, whose `done` is when it completes, GPU-cached blocks at
        the load's start, blocks loaded) while waiting for or after that load, until admitted."""
        self.store_due = 0.0
        """With a host KV tier: when the latest copy of its blocks to host memory completes."""
        self.g3_restore: tuple[Transfer, list[int]] | None = None
        """With a disk KV tier: (when its read from disk into host memory completes, the keys)."""

    @property
    def prompt_runs(self) -> list[Run]:
        """The prompt as runs (made the first time they are asked for)."""
        prompt = self._prompt
        if not isinstance(prompt, list):
            prompt = self._prompt = prompt.input_runs()
        return prompt

    @property
    def length(self) -> int:
        return self.prompt_len + self.generated

    def tokens_left(self, max_model_len: int | None) -> int:
        """Output tokens the request may still produce (its budget and the context limit)."""
        left = self.max_output - self.generated
        return left if max_model_len is None else min(left, max_model_len - self.length)

    def full_block_keys(self, num_blocks: int, block_size: int, generated: int = -1) -> list[int]:
        """Keys of the first `num_blocks` full blocks (computed on demand, then kept).

        `generated` is the number of generated tokens known (default: `self.generated`).
        """
        keys = self.keys
        have = len(keys)
        if have < num_blocks and self._range_keys(num_blocks, block_size, generated):
            have = len(keys)
        if have < num_blocks:
            runs = self.prompt_runs
            if num_blocks * block_size > self.prompt_len:
                count = self.generated if generated < 0 else generated
                runs = runs + output_runs(self.output_base, count, self.output_ids)
            parent = keys[-1] if keys else ROOT_KEY
            keys.extend(chain_keys(runs, block_size, num_blocks - have, have, parent))
        return keys

    def _range_keys(self, num_blocks: int, block_size: int, generated: int) -> bool:
        """Extend `keys` from the process's `RANGE_KEYS` when the prompt is a turn of consecutive
        trace ids (a long session's turns then key only their new blocks); False if it is not.
        Blocks past the prompt (generated tokens) are keyed from the prompt's last blocks on."""
        prompt = self._prompt
        if isinstance(prompt, list) or type(prompt.block_values) is not range:
            return False
        keys = self.keys
        have = len(keys)
        inside = min(num_blocks, self.prompt_len // block_size)
        if have < inside:
            keys += RANGE_KEYS.keys(prompt.block_values, prompt.block_size, block_size, inside)[have:inside]
            have = inside
        if have < num_blocks:
            trace_block = prompt.block_size
            start = window_start(have, trace_block, block_size)
            runs = expand_hash_ids(prompt.block_values[start // trace_block:], trace_block, self.prompt_len - start)
            count = self.generated if generated < 0 else generated
            runs += output_runs(self.output_base, count, self.output_ids)
            keys += chain_keys(runs, block_size, num_blocks - have, have - start // block_size,
                               keys[-1] if keys else ROOT_KEY)
        return True

    def add_token_pass(self, pass_index: int) -> None:
        """Record that this request got one token at the end of worker pass `pass_index`."""
        spans = self.token_spans
        if spans and spans[-1] == pass_index:
            spans[-1] = pass_index + 1
        else:
            spans.append(pass_index)
            spans.append(pass_index + 1)
