"""Quantities of a job rehearsal on the command line, each with its unit: token budgets (``15.6T``),
prices (``2.5/device-hour``, ``0.08/kWh``), bandwidths (``2TB/s``), power (``700W``) and fractions
(``15%``). A quantity that needs a unit and has none is an error naming the field and the valid forms,
never a guessed unit."""

from __future__ import annotations

import math
import re

from windtunnel.specs.errors import WindtunnelError

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
_SCALE = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}


def _finite_positive(value: float, field: str, text: str, forms: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise WindtunnelError(f"Field '{field}' has value '{text}'; it must be positive ({forms}).", field=field)
    return value


def parse_tokens(text: str | float | int, field: str = "tokens") -> float:
    """A token count: ``15.6T``, ``800B``, ``4M``, ``250k`` (optionally followed by ``tokens``) or a whole
    number of tokens. Returns tokens (float)."""
    forms = "a token count such as 15.6T, 800B, 4M or 2500000000"
    if isinstance(text, bool):
        raise WindtunnelError(f"Field '{field}' must be {forms}, got {text!r}.", field=field)
    if isinstance(text, (int, float)):
        return _finite_positive(float(text), field, str(text), forms)
    m = re.fullmatch(rf"\s*{_NUMBER}\s*([kKMBGTP]?)\s*(?:tok|tokens?)?\s*", str(text))
    if m is None:
        raise WindtunnelError(f"Field '{field}' has value '{text}', which is not a token count; give {forms}.",
                              field=field)
    return _finite_positive(float(m.group(1)) * _SCALE[m.group(2)], field, str(text), forms)


_DEVICE_HOUR = {"device-hour", "device-h", "devicehour", "gpu-hour", "gpu-h", "npu-hour", "npu-h", "chip-hour",
                "card-hour"}


def parse_device_hour_price(text: str, field: str = "price") -> tuple[float, str]:
    """A price per device-hour: ``2.5/device-hour`` (also ``/gpu-hour``, ``/npu-hour``), optionally with a
    currency (``USD2.5/device-hour``, ``$2.5/gpu-hour``). Returns (price per device-hour, currency or '')."""
    forms = "a price per device-hour such as 2.5/device-hour, $2.5/gpu-hour or EUR1.9/npu-hour"
    m = re.fullmatch(rf"\s*([A-Za-z$€£¥]*)\s*{_NUMBER}\s*([A-Za-z$€£¥]*)\s*/\s*([A-Za-z-]+)\s*", str(text))
    if m is None or m.group(4).lower() not in _DEVICE_HOUR:
        raise WindtunnelError(f"Field '{field}' has value '{text}'; give {forms} (a bare number has no unit).",
                              field=field)
    return _finite_positive(float(m.group(2)), field, text, forms), (m.group(1) or m.group(3))


def parse_energy_price(text: str, field: str = "energy-price") -> tuple[float, str]:
    """A price per kWh: ``0.08/kWh`` (also ``/MWh``), optionally with a currency. Returns (price per kWh,
    currency or '')."""
    forms = "a price per energy such as 0.08/kWh or USD80/MWh"
    m = re.fullmatch(rf"\s*([A-Za-z$€£¥]*)\s*{_NUMBER}\s*([A-Za-z$€£¥]*)\s*/\s*(kWh|MWh|Wh)\s*", str(text), re.I)
    if m is None:
        raise WindtunnelError(f"Field '{field}' has value '{text}'; give {forms} (a bare number has no unit).",
                              field=field)
    per_kwh = {"wh": 1e3, "kwh": 1.0, "mwh": 1e-3}[m.group(4).lower()]
    return _finite_positive(float(m.group(2)) * per_kwh, field, text, forms), (m.group(1) or m.group(3))


def parse_bandwidth(text: str, field: str = "storage-bandwidth") -> float:
    """A bandwidth in bytes per second: ``2TB/s``, ``500GB/s``, ``400Gb/s`` (bits), ``1.5e12B/s``. Returns B/s."""
    forms = "a bandwidth such as 2TB/s, 500GB/s or 400Gb/s"
    m = re.fullmatch(rf"\s*{_NUMBER}\s*([kKMGTP]?)([Bb])\s*/\s*s\s*", str(text))
    if m is None:
        raise WindtunnelError(f"Field '{field}' has value '{text}'; give {forms} (a bare number has no unit).",
                              field=field)
    value = _finite_positive(float(m.group(1)) * _SCALE[m.group(2)] / (8.0 if m.group(3) == "b" else 1.0), field,
                             text, forms)
    if not 1e6 <= value <= 1e16:  # 1 MB/s to 10 PB/s: below, a checkpoint takes years; above, no storage exists
        raise WindtunnelError(f"Field '{field}' is '{text}' ({value:.3g} B/s); give a bandwidth from 1MB/s to "
                              "10PB/s.", field=field)
    return value


def parse_power(text: str, field: str = "device-power") -> float:
    """A power: ``700W``, ``1.2kW``. Returns watts."""
    forms = "a power such as 700W or 1.2kW"
    m = re.fullmatch(rf"\s*{_NUMBER}\s*(k?)W\s*", str(text), re.I)
    if m is None:
        raise WindtunnelError(f"Field '{field}' has value '{text}'; give {forms} (a bare number has no unit).",
                              field=field)
    return _finite_positive(float(m.group(1)) * (1e3 if m.group(2) else 1.0), field, text, forms)


def parse_fraction(text: str | float, field: str, *, allow_zero: bool = True) -> float:
    """A fraction in [0, 1]: ``15%`` or ``0.15``."""
    forms = "a fraction such as 15% or 0.15"
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(rf"\s*{_NUMBER}\s*(%?)\s*", str(text))
        if m is None:
            raise WindtunnelError(f"Field '{field}' has value '{text}'; give {forms}.", field=field)
        value = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
    if not (0.0 <= value <= 1.0) or (value == 0.0 and not allow_zero):
        raise WindtunnelError(f"Field '{field}' has value '{text}'; it must lie in {'[0' if allow_zero else '(0'}, 1] "
                              f"({forms}).", field=field)
    return value


def parse_pue(text: str | float, field: str = "pue") -> float:
    """Power usage effectiveness: facility power / IT power, a number >= 1 (``1.1``)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not (math.isfinite(value) and value >= 1.0):
        raise WindtunnelError(f"Field '{field}' has value '{text}'; PUE is facility power over IT power, a number "
                              ">= 1 such as 1.1.", field=field)
    return value


def format_tokens(tokens: float) -> str:
    """``15.6T``-style short form of a token count."""
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if tokens >= size:
            return f"{tokens / size:.4g}{suffix}"
    return f"{tokens:.4g}"
