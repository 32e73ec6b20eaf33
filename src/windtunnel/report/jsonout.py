"""Strict JSON for every ``--json`` output: no NaN or Infinity tokens (not JSON), never a silent null."""

from __future__ import annotations

import json
import math
from typing import Any

from windtunnel.specs.errors import InternalError


def _first_non_finite(value: Any, path: str = "") -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path or '(top level)'} = {value!r}"
    if isinstance(value, dict):
        for key, item in value.items():
            found = _first_non_finite(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = _first_non_finite(item, f"{path}[{index}]")
            if found:
                return found
    return None


def dumps(data: Any, **kwargs: Any) -> str:
    """``json.dumps(data, allow_nan=False, **kwargs)``; a non-finite number is an InternalError naming where
    it is (a result that reached the output without its check), not a ValueError traceback. A result printed by a
    windtunnel command carries its provenance (report/provenance.py: version, inputs, catalog digest)."""
    from windtunnel.report.provenance import stamp

    data = stamp(data)
    try:
        return json.dumps(data, allow_nan=False, **kwargs)
    except ValueError as exc:
        where = _first_non_finite(data)
        if where is None:
            raise
        raise InternalError(f"a JSON output holds a non-finite number ({where})", {"output": "json"}) from exc
