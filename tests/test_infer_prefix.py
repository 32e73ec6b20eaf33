"""Prefix caching: block-hash matching, LRU eviction, the host tier, cache-aware routing, the Mooncake trace."""

from __future__ import annotations

import json
import math

import pytest

from conftest import REPO
from windtunnel.infer.api import simulate_serving
from windtunnel.infer.prefix import PrefixCache
from windtunnel.infer.traffic import parse_traffic
from windtunnel.specs.errors import WindtunnelError

MOONCAKE = REPO / "validation" / "traces" / "mooncake_conversation.jsonl"


def _trace(tmp_path, rows: list[tuple[float, int, int, list[int]]]) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t * 1000, "input_length": n, "output_length": o, "hash_ids": h})
                            + "\n" for t, n, o, h in rows))
    return f"trace:{path}"


def test_requests_sharing_hash_ids_hit(tmp_path):
    """B shares A's first three 512-token blocks and arrives after A's prefill: it reuses 1,536 tokens and its
    prefill (one block) is faster; C shares nothing; without the cache nothing hits."""
    traffic = _trace(tmp_path, [(0.0, 2048, 4, [1, 2, 3, 4]), (5.0, 2048, 4, [1, 2, 3, 9]), (10.0, 1024, 4, [7, 8])])
    cached = simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1", traffic)
    stats = cached.prefix_cache
    assert stats["lookups"] == 3 and stats["hit_tokens"] == 3 * 512
    assert stats["request_hit_rate"] == pytest.approx(1 / 3)
    assert stats["token_hit_rate"] == pytest.approx(1536 / (2048 + 2048 + 1024))
    off = simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1,prefix_cache=false", traffic)
    assert off.prefix_cache is None
    assert cached.ttft_s["mean"] < off.ttft_s["mean"]
    assert json.dumps(cached.to_json_dict(), allow_nan=False)


def test_a_repeated_prompt_still_computes_its_last_token(tmp_path):
    traffic = _trace(tmp_path, [(0.0, 1024, 2, [5, 6]), (5.0, 1024, 2, [5, 6])])
    stats = simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1", traffic).prefix_cache
    assert stats["hit_tokens"] == 1023


def test_lru_evicts_the_least_recent_chain_tail_first():
    cache = PrefixCache(block_tokens=512, capacity_tokens=4 * 512)
    cache.insert((1, 2), 1024, free_tokens=4 * 512)
    cache.insert((3, 4), 1024, free_tokens=4 * 512)
    assert cache.lookup((1, 2), 2048)[0] == 1024  # refreshes chain (1, 2): (3, 4) is now least recent
    cache.insert((5, 6), 1024, free_tokens=4 * 512)
    assert cache.matched_blocks((3, 4)) == 0 and cache.matched_blocks((1, 2)) == 2
    assert cache.matched_blocks((5, 6)) == 2 and cache.evicted_blocks == 2
    cache.bound(3 * 512)  # less free memory: the tail of the older chain goes first
    assert cache.matched_blocks((1, 2)) == 1 and cache.matched_blocks((5, 6)) == 2


def test_host_tier_keeps_evicted_blocks_and_charges_the_load():
    cache = PrefixCache(block_tokens=512, capacity_tokens=2 * 512, host_blocks=8, host_load_s_per_token=1e-6)
    cache.insert((1, 2), 1024, free_tokens=2 * 512)
    cache.insert((3, 4), 1024, free_tokens=2 * 512)
    assert list(cache.host) == [2, 1]
    cached, load_s = cache.lookup((1, 2, 7), 1536)
    assert cached == 1024 and load_s == pytest.approx(1024 * 1e-6)
    assert cache.matched_blocks((1, 2)) == 2 and 1 in cache.device and 1 not in cache.host


def test_cache_stays_within_the_free_kv_memory():
    result = simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1,replicas=2",
                              f"trace:{MOONCAKE},requests=400,speed=4")
    stats = result.prefix_cache
    assert stats["hit_tokens"] > 0 and stats["evicted_blocks"] >= 0
    for inst in result.instances:
        assert inst["kv_peak_tokens"] <= inst["kv_capacity_tokens"]


def test_cache_aware_routing_follows_the_prefix(tmp_path):
    """Round robin sends the second request of a conversation to the other instance (no hit); cache-aware
    routing sends it where its prefix is."""
    rows = [(0.0, 2048, 4, [1, 2, 3, 4]), (0.1, 1024, 4, [50, 51]), (0.2, 1024, 4, [60, 61]),
            (5.0, 2560, 4, [1, 2, 3, 4, 5])]
    traffic = _trace(tmp_path, rows)
    plain = simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1,replicas=2;router=round_robin", traffic)
    aware = simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1,replicas=2;router=cache_aware", traffic)
    assert plain.prefix_cache["hit_tokens"] == 0
    assert aware.prefix_cache["hit_tokens"] == 4 * 512


def test_mooncake_trace_loads_with_its_block_hashes():
    workload = parse_traffic(f"trace:{MOONCAKE}")
    assert workload.size == 12031 and workload.block_tokens == 512
    assert all(len(h) == math.ceil(n / 512) for h, n in zip(workload.hashes, workload.prompt, strict=True))
    first = parse_traffic(f"trace:{MOONCAKE},requests=10,start=60s")
    assert first.size == 10 and len(first.hashes) == 10


def test_bad_inputs_are_one_clear_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10}\n')
    with pytest.raises(WindtunnelError, match="hash_ids"):
        parse_traffic(f"trace:{bad}")
    traffic = _trace(tmp_path, [(0.0, 1024, 2, [1, 2])])
    with pytest.raises(WindtunnelError, match="prefix_hit"):
        simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1,prefix_hit=0.5", traffic)
    with pytest.raises(WindtunnelError, match="host_cache"):
        simulate_serving("llama3-8b", "h100-sxm", "mixed:tp=1,host_cache=100000", traffic)


def test_search_replays_the_hashes_with_the_router_asked_for():
    """A search on the Mooncake trace keeps the block hashes (screening subset and full traffic) and gives every
    candidate the cache-aware router."""
    from windtunnel.infer.search import search_deployments

    doc = search_deployments("llama3-8b", "h100-sxm", 8, f"trace:{MOONCAKE},requests=300", slo="ttft=5s,tpot=100ms",
                             top=2, workers=1, requests=100, router="cache_aware", mode="colocated")
    assert doc["feasible"]
    for row in doc["deployments"]:
        assert row["deployment"].endswith(";router=cache_aware")
        replay = simulate_serving("llama3-8b", "h100-sxm", row["deployment"], f"trace:{MOONCAKE},requests=300",
                                  slo="ttft=5s,tpot=100ms")
        assert replay.prefix_cache["hit_tokens"] > 0 and replay.slo_attainment == row["attainment"]
