"""vLLM V1's automatic prefix caching, block by block (vllm/v1/core/kv_cache_manager.py,
block_pool.py, kv_cache_utils.py, vllm/v1/request.py; 0.32).

- Every full block of a request is named, prompt and generated tokens alike (vLLM hashes each
  block once full: `Request.update_block_hashes`, `get_request_block_hasher`). A block of
  known token ids is named by a hash chained over every block before it (`block_hashes`), so
  a block is only ever shared by requests whose prompts agree up to its end. Blocks of unknown
  tokens (generated ones, prompts known by length only) are named by the request's identity
  and their index (`tuner.sim.scheduler`): never shared with another request, hit again by
  the same request after a preemption. Partial blocks are never cached, never hit.
- A block becomes cached when its tokens have been computed. A request that arrives (or comes
  back after a preemption) first takes the longest run of its leading blocks that is cached;
  those tokens are not computed again. At least one token is always computed (the one that
  samples the next output token: vLLM's `max_cache_hit_length = num_tokens - 1`), so a prompt
  that hits entirely recomputes its last block.
- A freed block keeps its contents and its name until its memory is needed: it counts as free
  (`kv_cache_usage` excludes it, as vLLM's does), and an allocation takes never-cached blocks
  first, then evicts cached ones, least recently freed first; a request's blocks are freed
  tail first, so its tail is evicted before its head.
- Two requests that compute the same block at the same time hold two copies; only the first
  is named here, the second request naming its blocks past it (vLLM names both and hits the
  first; the difference shows only when the first copy is evicted while the second is still
  free).

Queries and hits count new requests' prompt tokens, as vLLM's `vllm:prefix_cache_queries` and
`vllm:prefix_cache_hits` do (a resumed request's lookup is counted apart there, not here).
Pure bookkeeping: the scheduler owns the free-block count.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence

import numpy as np

_SEED = b"tuner-sim-prefix"


def block_hashes(token_ids: Sequence[int], block_size: int) -> tuple[bytes, ...]:
    """The chained name of each full block of `token_ids` (a trailing partial block has none)."""
    names: list[bytes] = []
    parent = _SEED
    tokens = np.asarray(token_ids, dtype=np.int64)
    for end in range(block_size, len(tokens) + 1, block_size):
        block = tokens[end - block_size : end].tobytes()
        parent = hashlib.blake2b(parent + block, digest_size=16).digest()
        names.append(parent)
    return tuple(names)


class PrefixCache:
    """Which named blocks hold KV, how many requests use each, and which free ones to evict."""

    def __init__(self) -> None:
        self.refs: dict[Hashable, int] = {}  # named block -> requests using it (0: free, cached)
        self.evictable: OrderedDict[Hashable, None] = OrderedDict()  # free named blocks, LRU first
        self.queries_tokens = 0
        self.hits_tokens = 0
        self.forget()

    def forget(self, owner: object = None) -> None:
        """Drop the kept lookup (`leading_hits`): of `owner` only, or whichever when None."""
        if owner is None or owner is getattr(self, "_owner", None):
            self._owner: object = None
            self._run: list[Hashable] = []  # the owner's cached leading names
            self._where: dict[Hashable, int] = {}  # name -> its index in the run
            self._evicted: list[Hashable] | None = None  # evicted since the owner's last lookup

    def __len__(self) -> int:
        return len(self.refs)

    def leading_hits(
        self, owner: object, names_from: Callable[[int], Iterable[Hashable]]
    ) -> list[Hashable]:
        """The cached leading run of `names_from(0)`, the names of `owner`'s blocks. The queue's
        head is looked up at every step while it waits, so the run is kept: the same owner's
        next lookup re-checks only the names evicted since (a name leaves the cache only by
        eviction) and the names past the run (`names_from(i)`: the names from index i)."""
        if owner is not self._owner:
            self.forget()
            self._owner, self._evicted = owner, []
        elif self._evicted:
            run, where = self._run, self._where
            cut = min(where.get(name, len(run)) for name in self._evicted)
            for name in run[cut:]:
                del where[name]
            del run[cut:]
            self._evicted.clear()
        run, where, refs = self._run, self._where, self.refs
        for name in names_from(len(run)):
            if name not in refs:
                break
            where[name] = len(run)
            run.append(name)
        return run[:]

    def evictable_among(self, names: Sequence[Hashable]) -> int:
        """How many of `names` are free now: taking them uses that many free blocks."""
        return sum(1 for name in names if self.refs.get(name) == 0)

    def take(self, names: Sequence[Hashable]) -> None:
        """A request uses these cached blocks (a hit)."""
        for name in names:
            if self.refs[name] == 0:
                del self.evictable[name]
            self.refs[name] += 1

    def add(self, name: Hashable) -> bool:
        """Name a block a request just computed; False when that name is cached already."""
        if name in self.refs:
            return False
        self.refs[name] = 1
        return True

    def release(self, names: Sequence[Hashable]) -> int:
        """A request frees its named blocks: those no other request uses become free (and
        stay cached, tail evicted first). Returns how many became free."""
        freed = 0
        for name in reversed(names):
            self.refs[name] -= 1
            if self.refs[name] == 0:
                self.evictable[name] = None
                freed += 1
        return freed

    def evict(self, count: int) -> None:
        """Reuse the memory of `count` free cached blocks, least recently freed first."""
        for _ in range(count):
            name, _ = self.evictable.popitem(last=False)
            del self.refs[name]
            if self._evicted is not None:
                self._evicted.append(name)

    def reset(self) -> None:
        """Forget every free cached block (vLLM's `reset_prefix_cache`, which refuses while a
        request holds blocks: the caller checks that none runs)."""
        self.evict(len(self.evictable))

    def record(self, queried_tokens: int, hit_tokens: int) -> None:
        self.queries_tokens += queried_tokens
        self.hits_tokens += hit_tokens
