"""Traces whose requests carry prompt block hashes (Mooncake's JSONL format), for the prefix cache.

One JSON object per line: ``timestamp`` (arrival, milliseconds from the start), ``input_length`` and
``output_length`` (tokens), ``hash_ids`` (hashes of the prompt's 512-token blocks, the last one partial;
requests sharing a leading run of ids share that prefix). Source of the format: kvcache-ai/Mooncake,
FAST25-release/traces (Qin et al., FAST 2025). Times are seconds after loading, lengths tokens.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from windtunnel.specs.errors import WindtunnelError

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
BLOCK_TOKENS = 512  # Mooncake's trace: one hash per 512-token block of the prompt


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[tuple[int, ...], ...]]:
    stamps, prompts, outputs, hashes = [], [], [], []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    missing = [k for k in FIELDS if k not in row]
                    if missing:
                        raise ValueError(f"missing {', '.join(missing)}")
                    stamps.append(float(row["timestamp"]) / 1000.0)
                    prompts.append(int(row["input_length"]))
                    outputs.append(int(row["output_length"]))
                    hashes.append(tuple(int(h) for h in row["hash_ids"]))
                except (ValueError, TypeError) as exc:
                    raise WindtunnelError(f"Trace '{path}' line {number} is not a request of the Mooncake format "
                                          f"({exc}; field 'traffic'); expected JSON objects with {', '.join(FIELDS)} "
                                          "(timestamp in ms, lengths in tokens, hash_ids a list of integers).",
                                          field="traffic") from exc
    except OSError as exc:
        raise WindtunnelError(f"Cannot read trace '{path}' (field 'traffic'): {exc}.", field="traffic") from exc
    if not stamps:
        raise WindtunnelError(f"Trace '{path}' has no requests (field 'traffic').", field="traffic")
    seconds = np.asarray(stamps)
    order = np.argsort(seconds, kind="stable")
    seconds = seconds[order] - seconds[order][0]
    prompt = np.maximum(1, np.asarray(prompts, dtype=np.int64)[order])
    output = np.maximum(1, np.asarray(outputs, dtype=np.int64)[order])
    return seconds, prompt, output, tuple(hashes[i] for i in order)


def load_hashed_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[tuple[int, ...], ...]]:
    """(arrival s from the first request, prompt tokens, output tokens, per-request block hashes)."""
    p = Path(path)
    if not p.exists():
        raise WindtunnelError(f"Trace file not found: '{p}' (field 'traffic').", field="traffic")
    return _load(str(p.resolve()), p.stat().st_mtime)
