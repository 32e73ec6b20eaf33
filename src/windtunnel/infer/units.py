"""Small parsers shared by the serving specs: numbers, booleans, durations, with clear errors."""

from __future__ import annotations

import math
import re

from windtunnel.specs.bounds import MAX_REPLICAS, MAX_REQUESTS, shown
from windtunnel.specs.errors import WindtunnelError

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|us|s|sec|min|m|h)?\s*$")
_SCALE = {None: 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0, "m": 60.0, "h": 3600.0}


def parse_seconds(value: object, field: str, *, high: float | None = None) -> float:
    """A duration in seconds from ``2s``, ``100ms``, ``1.5min``, ``1h``; at most ``high`` seconds when given. Text
    needs its unit (``--slo tpot=100`` is an error, never a guessed 100 s; ``0`` alone is fine); a number from a YAML
    file or the Python API is seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise WindtunnelError(
                f"Field '{field}' is '{value}', which is not a duration; write a number with a unit: us, ms, s, min, "
                "h (e.g. 2s, 100ms).", field=field)
        if match.group(2) is None and float(match.group(1)) != 0.0:
            raise WindtunnelError(
                f"Field '{field}' is '{value}', a number without a unit; a duration needs one of us, ms, s, min, h "
                f"(e.g. {match.group(1)}ms or {match.group(1)}s).", field=field)
        seconds = float(match.group(1)) * _SCALE[match.group(2)]
    if not math.isfinite(seconds) or seconds < 0:
        raise WindtunnelError(f"Field '{field}' must be a non-negative duration, got {value!r}.", field=field)
    if high is not None and seconds > high:
        raise WindtunnelError(f"Field '{field}' is {value!r} ({seconds:g} s); it must be a duration from 0 to {high:g} s.",
                              field=field)
    return seconds


_INT_LIMITS = {"replicas": MAX_REPLICAS, "requests": MAX_REQUESTS, "concurrency": MAX_REQUESTS}


def parse_int(value: object, field: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer from ``minimum`` to ``maximum`` (default: the field's bound in specs/bounds.py, else 2^31 - 1);
    ``1e3`` and ``1000.0`` are accepted when whole."""
    if maximum is None:
        maximum = _INT_LIMITS.get(field, 2**31 - 1)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number != int(number) or not minimum <= number <= maximum:
        raise WindtunnelError(f"Field '{field}' must be a whole number from {minimum:,} to {maximum:,}, got "
                              f"{shown(value)}.", field=field)
    return int(number)


def parse_float(value: object, field: str, *, low: float = -math.inf, high: float = math.inf,
                low_open: bool = False) -> float:
    """A float in [low, high] (or (low, high] when ``low_open``)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    ok = not isinstance(value, bool) and math.isfinite(number) and number <= high and (number > low if low_open else number >= low)
    if not ok:
        bracket = "(" if low_open else "["
        raise WindtunnelError(f"Field '{field}' must be a number in {bracket}{low:g}, {high:g}], got {value!r}.",
                              field=field)
    return number


def parse_bool(value: object, field: str) -> bool:
    """true/false, yes/no, on/off, 1/0."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise WindtunnelError(f"Field '{field}' takes true or false, got {value!r}.", field=field)


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """Split on ``separator`` outside parentheses: ``a=1,b=f(2,3)`` -> ['a=1', 'b=f(2,3)']."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        if char == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]
