"""Durations on the command line and in fault profiles: ``30min``, ``60s``, ``12s``, ``54d``, ``24h``, ``1.5h``.

Every duration is returned in seconds (float). Text needs its unit (``--checkpoint-every 30`` is an error,
never a guessed 30 s; ``0`` alone is fine); a number from a YAML file or the Python API is seconds.
"""

from __future__ import annotations

import math
import re

from windtunnel.specs.errors import WindtunnelError

_UNITS_S = {
    "ms": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "w": 7 * 86400.0, "week": 7 * 86400.0, "weeks": 7 * 86400.0,
    "y": 365 * 86400.0, "yr": 365 * 86400.0, "year": 365 * 86400.0, "years": 365 * 86400.0,
}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
UNIT_HELP = "a number with a unit: ms, s, min, h, d, w, y (e.g. 30min, 60s, 1.5h, 54d)"


def parse_duration(value: str | float | int, field: str = "duration", *, allow_zero: bool = True) -> float:
    """Parse a duration into seconds; bad input raises a WindtunnelError naming the field and the valid forms."""
    if isinstance(value, bool):
        raise WindtunnelError(f"Field '{field}' must be a duration ({UNIT_HELP}), got {value!r}.", field=field)
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _PATTERN.match(str(value))
        unit = match.group(2).lower() if match else ""
        if match is None or unit not in _UNITS_S and unit != "":
            raise WindtunnelError(
                f"Field '{field}' has value '{value}', which is not a duration; give {UNIT_HELP}.", field=field
            )
        if not unit and float(match.group(1)) != 0.0:
            raise WindtunnelError(f"Field '{field}' has value '{value}', a number without a unit; give {UNIT_HELP}.",
                                  field=field)
        seconds = float(match.group(1)) * (_UNITS_S[unit] if unit else 1.0)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        rule = "a positive duration" if not allow_zero else "a duration of zero or more"
        raise WindtunnelError(f"Field '{field}' has value '{value}'; it must be {rule} ({UNIT_HELP}).", field=field)
    return seconds


def format_duration(seconds: float) -> str:
    """A short human form of a duration in seconds (for tables and messages)."""
    if not math.isfinite(seconds):
        return "inf"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if abs(seconds) >= size:
            return f"{seconds / size:.3g}{unit}"
    return f"{seconds:.3g}s"
