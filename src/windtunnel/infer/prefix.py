"""Prefix caching: a block-hash prefix cache per serving instance, an optional host-memory tier, cache-aware routing.

Model (vLLM automatic prefix caching / SGLang RadixAttention, at block granularity):

* A prompt is a list of block hashes (``Workload.hashes``: e.g. the Mooncake trace's 512-token blocks). A
  block's hash identifies its whole prefix (hash chain), so a request hits the longest leading run of its
  hashes that the instance holds; hit tokens = hit blocks x block tokens, at most prompt - 1 (the last token is
  always computed, as vLLM does). Prefill then computes only the uncached suffix (attention over the cached
  context, :meth:`windtunnel.infer.iteration.IterationModel.prefill_attention`).
* When a request's prefill completes, its prompt's full blocks enter the cache (the partial last block is not
  cached). Hits are matched when the request reaches the instance, and the matched blocks are refreshed then.
* Capacity: cached blocks live in the KV memory the running sequences leave free (``cap - kv`` tokens of the
  instance's paged KV cache); whenever that shrinks, least recently used blocks are evicted. A chain's blocks
  are refreshed tail first, so the tail of a prefix is evicted before its head (as vLLM's free-block queue
  orders them). Blocks shared with running sequences are counted in both (a conservative, smaller cache).
* Host tier (``host_cache`` GiB of host memory per device): blocks evicted from the device go to host memory
  (LRU); a hit there is loaded back over the device's host link (``host_link_bandwidth`` of the chip catalog:
  PCIe Gen5 x16 63 GB/s per direction on H100/H200, NVLink-C2C on GB200), each device loading its share of the
  KV in parallel; the request reaches the instance's queue when the load is done.
* Cache-aware routing (router ``cache_aware``): the instance holding the longest prefix of the request
  (either tier), ties to the fewest outstanding tokens (as SGLang's cache-aware router and Mooncake's
  Conductor balance reuse against load).

Sizes are tokens and blocks, bandwidths bytes/s, times seconds.
"""

from __future__ import annotations

from collections import OrderedDict

from windtunnel.specs.errors import WindtunnelError


class PrefixCache:
    """One instance's cached prompt blocks: a device tier bounded by free KV memory and an optional host tier."""

    def __init__(self, block_tokens: int, capacity_tokens: int, host_blocks: int = 0,
                 host_load_s_per_token: float = 0.0) -> None:
        self.block_tokens = block_tokens
        self.device: OrderedDict[int, None] = OrderedDict()
        self.host: OrderedDict[int, None] = OrderedDict()
        self.host_blocks = host_blocks
        self.host_load_s_per_token = host_load_s_per_token
        self.limit_blocks = capacity_tokens // block_tokens
        self.lookups = 0
        self.prompt_tokens = 0
        self.hit_tokens = 0
        self.host_hit_tokens = 0
        self.hit_requests = 0
        self.evicted_blocks = 0

    def matched_blocks(self, hashes: tuple[int, ...]) -> int:
        """Length of the longest leading run of ``hashes`` held in either tier (no refresh)."""
        device, host = self.device, self.host
        count = 0
        for h in hashes:
            if h in device or h in host:
                count += 1
            else:
                break
        return count

    def lookup(self, hashes: tuple[int, ...], prompt: int) -> tuple[int, float]:
        """A request reaches the instance: (cached tokens it reuses, seconds to load its host-tier hits).
        Matched blocks are refreshed; host-tier hits move back to the device tier."""
        count = self.matched_blocks(hashes)
        cached = min(count * self.block_tokens, prompt - 1)
        usable = -(-cached // self.block_tokens) if cached > 0 else 0
        host_tokens = 0
        device, host = self.device, self.host
        for h in reversed(hashes[:usable]):  # tail first: the head ends most recent
            if h in host:
                del host[h]
                host_tokens += self.block_tokens
            device[h] = None
            device.move_to_end(h)
        host_tokens = min(host_tokens, cached)
        self.lookups += 1
        self.prompt_tokens += prompt
        self.hit_tokens += cached
        self.host_hit_tokens += host_tokens
        self.hit_requests += cached > 0
        self._bound()
        return cached, host_tokens * self.host_load_s_per_token

    def insert(self, hashes: tuple[int, ...], prompt: int, free_tokens: int) -> None:
        """A prefill completed: the prompt's full blocks enter the device tier, bounded by ``free_tokens``."""
        device = self.device
        for h in reversed(hashes[:prompt // self.block_tokens]):
            device[h] = None
            device.move_to_end(h)
        self.bound(free_tokens)

    def bound(self, free_tokens: int) -> None:
        """The running sequences leave ``free_tokens`` of KV memory: evict LRU blocks beyond it (to the host tier)."""
        self.limit_blocks = max(0, free_tokens) // self.block_tokens
        if len(self.device) > self.limit_blocks:
            self._bound()

    def _bound(self) -> None:
        device, host = self.device, self.host
        excess = len(device) - self.limit_blocks
        if excess <= 0:
            return
        self.evicted_blocks += excess
        pop = device.popitem
        if not self.host_blocks:
            for _ in range(excess):
                pop(last=False)
            return
        for _ in range(excess):
            host[pop(last=False)[0]] = None
        extra = len(host) - self.host_blocks
        if extra > 0:
            drop = host.popitem
            for _ in range(extra):
                drop(last=False)


def attach_caches(sim) -> bool:
    """Give every prefill-capable instance of ``sim`` a cache when the workload carries block hashes and its pool
    enables caching (``prefix_cache`` on, or unset = on with hashes); returns whether any instance has one."""
    hashes = sim.workload.hashes
    any_cache = False
    for inst in sim.instances:
        inst.cache = None
        spec = inst.plan.spec
        enabled = spec.prefix_cache if spec.prefix_cache is not None else hashes is not None
        if inst.role == "decode" or not enabled or hashes is None:
            continue
        if inst.plan.prefix_hit > 0:
            raise WindtunnelError(f"Pool '{spec.text()}': 'prefix_hit' (a fixed hit rate) and a traffic with block "
                                  "hashes cannot both set the cache hits (field 'prefix_hit': drop it, or set "
                                  "prefix_cache=false).", field="prefix_hit")
        inst.cache = PrefixCache(sim.workload.block_tokens, inst.cap, *_host_tier(inst.plan, sim.workload.block_tokens))
        any_cache = True
    return any_cache


def _host_tier(plan, block_tokens: int) -> tuple[int, float]:
    """(host-tier capacity in blocks, load seconds per token) of a pool's ``host_cache`` GiB per device."""
    gib = plan.spec.host_cache
    if not gib:
        return 0, 0.0
    chip = plan.chip
    if chip.host_link_bandwidth is None or chip.host_memory_bytes is None:
        raise WindtunnelError(f"Field 'host_cache' is {gib:g} GiB but chip '{chip.id}' has no catalogued host link "
                              "(host_link_bandwidth / host_memory_bytes); valid: host_cache=0 on this chip.",
                              field="host_cache")
    if gib * 2**30 > chip.host_memory_bytes:
        raise WindtunnelError(f"Field 'host_cache' is {gib:g} GiB per device but chip '{chip.id}' has "
                              f"{chip.host_memory_bytes / 2**30:.0f} GiB of host memory per device; valid: "
                              f"0..{chip.host_memory_bytes / 2**30:.0f}.", field="host_cache")
    tokens = int(gib * 2**30 // plan.kv_bytes_per_token) * plan.dp
    # each device of an attention group loads its share of a token's KV (kv_bytes_per_token is per device)
    return tokens // block_tokens, plan.kv_bytes_per_token / chip.host_link_bandwidth / plan.dp


def route(pool: list, hashes: tuple[int, ...]):
    """The instance of ``pool`` holding the longest prefix of ``hashes``; ties to the fewest outstanding tokens."""
    best, best_key = None, None
    for inst in pool:
        cache = inst.cache
        key = (-(cache.matched_blocks(hashes) if cache is not None else 0), inst.outstanding)
        if best_key is None or key < best_key:
            best, best_key = inst, key
    return best


def cache_summary(instances: list) -> dict | None:
    """Hit rates (tokens and requests), host-tier hits and evictions over every cached instance; None without."""
    caches = [inst.cache for inst in instances if getattr(inst, "cache", None) is not None]
    if not caches:
        return None
    prompt = sum(c.prompt_tokens for c in caches)
    lookups = sum(c.lookups for c in caches)
    hit = sum(c.hit_tokens for c in caches)
    host = sum(c.host_hit_tokens for c in caches)
    return {"block_tokens": caches[0].block_tokens, "instances": len(caches), "lookups": lookups,
            "prompt_tokens": prompt, "hit_tokens": hit, "token_hit_rate": hit / prompt if prompt else 0.0,
            "request_hit_rate": sum(c.hit_requests for c in caches) / lookups if lookups else 0.0,
            "host_hit_tokens": host, "host_tier": any(c.host_blocks for c in caches),
            "evicted_blocks": sum(c.evicted_blocks for c in caches),
            "rule": "hits = longest cached leading run of the prompt's block hashes (<= prompt - 1 tokens); LRU "
                    "eviction within the KV memory the running sequences leave free"}


def cache_text(stats: dict) -> str:
    """One line on the prefix cache's hits (for the text output)."""
    host = f", {stats['host_hit_tokens']:,} of them loaded from the host tier" if stats["host_tier"] else ""
    return (f"prefix cache ({stats['block_tokens']}-token blocks, {stats['instances']} instances): "
            f"{stats['token_hit_rate']:.1%} of prompt tokens reused ({stats['hit_tokens']:,}{host}); "
            f"{stats['request_hit_rate']:.1%} of requests hit; {stats['evicted_blocks']:,} blocks evicted")
