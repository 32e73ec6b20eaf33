"""Bounds of the questions windtunnel answers, checked where inputs enter (issue 20).

Beyond these limits the models either stop being physical (a sequence of 10^20 tokens) or their cost explodes
(10^18 micro-batches per step, a billion serving replicas, 10^9 Monte-Carlo replications): each is one clear
error naming the field, its value and the valid range, never a hang, a MemoryError or an overflow.
"""

from __future__ import annotations

import math
from pathlib import Path

from windtunnel.specs.errors import WindtunnelError

MAX_DEVICES = 10_000_000  # ten times the largest clusters built (about 1e5-1e6 accelerators)
MAX_SEQ_LEN = 1 << 24  # 16.8M tokens per sequence (the longest published contexts are 1e7)
MAX_MICRO_BATCHES = 100_000  # micro-batches per step and pipeline (real jobs: up to a few thousand)
MAX_EXACT_MICRO_BATCHES = 10_000  # played whole (--exact, traces): 1e5 took 25 s and 1.7 GB
MAX_REPLICAS = 100_000  # serving instances of one pool
MAX_REQUESTS = 10_000_000  # requests one serving simulation plays
MAX_REPLICATIONS = 1_000_000  # Monte-Carlo replications
MAX_SIM_EVENTS = 2e8  # expected failures over all replications (replications x horizon x rate): ~2 min on one core
MAX_CONFIG_BYTES = 64 << 20  # a YAML / JSON / CSV input file (configs are kilobytes; traces a few MB)
MAX_TRACE_BYTES = 2 << 30  # a profiler trace or an ONNX model


def shown(value, limit: int = 200) -> str:
    """``value`` as an error message echoes it: its repr, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def check_whole(field: str, value, lo: int, hi: int, *, what: str = "") -> int:
    """``value`` as a whole number in [lo, hi] (an integral float accepted), else one clear error."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise WindtunnelError(f"Field '{field}' is {shown(value)}; it must be a whole number from {lo:,} to {hi:,}"
                              f"{what}.", field=field)
    return value


def check_number(field: str, value, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
                 hi_open: bool = False, what: str = "") -> float:
    """``value`` as a finite float within the bounds given (open or closed), else one clear error."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    number = float(value) if ok else math.nan
    ok = ok and math.isfinite(number)
    if ok and lo is not None:
        ok = number > lo if lo_open else number >= lo
    if ok and hi is not None:
        ok = number < hi if hi_open else number <= hi
    if not ok:
        left = "" if lo is None else f"{'above' if lo_open else 'at least'} {lo:g}"
        right = "" if hi is None else f"{'below' if hi_open else 'at most'} {hi:g}"
        rule = " and ".join(part for part in (left, right) if part) or "finite"
        raise WindtunnelError(f"Field '{field}' is {shown(value)}; it must be a finite number {rule}{what}.",
                              field=field)
    return number


def check_file_size(path: str | Path, limit: int = MAX_CONFIG_BYTES, what: str = "Input file") -> None:
    """Refuse a file larger than ``limit`` bytes before reading it (a config is kilobytes)."""
    try:
        size = Path(path).stat().st_size
    except OSError:
        return  # the reader reports a missing or unreadable file
    if size > limit:
        raise WindtunnelError(f"{what} '{shown(str(path))}' is {size:,} bytes; windtunnel reads files of at most "
                              f"{limit:,} bytes.", field="file")
