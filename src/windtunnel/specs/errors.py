"""The one error type users see: a clear, one-paragraph message, never a traceback."""

from __future__ import annotations


class WindtunnelError(Exception):
    """A user-facing error: names the field, the value and what would be valid."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def choices_text(values) -> str:
    """Render a short, sorted list of valid values for an error message."""
    items = sorted(str(v) for v in values)
    if len(items) > 24:
        items = items[:24] + ["..."]
    return ", ".join(items)
