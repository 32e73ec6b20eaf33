"""Turn pydantic validation errors into one readable WindtunnelError paragraph."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from windtunnel.specs.errors import WindtunnelError

M = TypeVar("M", bound=BaseModel)


def build(model_type: type[M], data: Any, what: str) -> M:
    """Validate ``data`` into ``model_type``; on failure raise one message naming field, value and rule."""
    if not isinstance(data, dict):
        raise WindtunnelError(f"{what}: expected a mapping of fields, got {type(data).__name__} ({data!r:.80}).")
    try:
        return model_type.model_validate(data)
    except ValidationError as exc:
        parts = []
        for err in exc.errors()[:4]:
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            value = err.get("input")
            shown = "missing" if err["type"] == "missing" else f"value {value!r:.60}"
            # A validator's ValueError reaches here as "Value error, <its message>": keep the message.
            parts.append(f"field '{loc}' ({shown}): {err['msg'].removeprefix('Value error, ')}")
        more = f" (and {len(exc.errors()) - 4} more)" if len(exc.errors()) > 4 else ""
        raise WindtunnelError(f"{what} is invalid: " + "; ".join(parts) + more + ".") from exc
