"""The one error type users see: a clear, one-paragraph message, never a traceback."""

from __future__ import annotations


class WindtunnelError(Exception):
    """A user-facing error: names the field, the value and what would be valid."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(_cut_echoes(str(message)))
        self.field = field


def _cut_echoes(message: str, limit: int = 200) -> str:
    """The message with every run of more than ``limit`` characters without a space (an echoed input: a
    100,000-character plan) cut to its first ``limit`` characters and its length."""
    if len(message) <= limit:
        return message
    import re

    return re.sub(rf"\S{{{limit + 1},}}", lambda m: f"{m.group(0)[:limit]}...({len(m.group(0)):,} characters)",
                  message)


def choices_text(values) -> str:
    """Render a short, sorted list of valid values for an error message."""
    items = sorted(str(v) for v in values)
    if len(items) > 24:
        items = items[:24] + ["..."]
    return ", ".join(items)


def did_you_mean(name: str, values) -> str:
    """' - did you mean 'x'?' for the valid values closest to ``name`` (case, '_' vs '-', a missing suffix and
    small typos forgiven), or '' when none is close. Never applied silently: the caller still raises."""
    import difflib

    def key(text: str) -> str:
        return str(text).lower().replace("_", "-").replace(" ", "")

    by_key = {key(v): str(v) for v in values}
    wanted = key(name)
    if wanted in by_key:
        found = [by_key[wanted]]
    else:
        found = sorted(v for k, v in by_key.items() if wanted and k.startswith(wanted))[:3]
        if not found:
            found = [by_key[k] for k in difflib.get_close_matches(wanted, list(by_key), n=1, cutoff=0.75)]
    if not found:
        return ""
    return " - did you mean " + " or ".join(f"'{v}'" for v in found) + "?"


class InternalError(WindtunnelError):
    """A result that cannot be true (a non-finite or negative time, a share outside [0, 1], a feasible plan
    over its memory): a bug in windtunnel, raised with the inputs that produced it instead of a number."""

    def __init__(self, what: str, inputs: object) -> None:
        shown = str(inputs)
        if len(shown) > 2000:
            shown = shown[:2000] + " ..."
        super().__init__(f"Internal error, please report it with this message: {what}. Inputs: {shown}",
                         field="internal")


def check_result(what: str, inputs: object, *, times: dict | None = None, shares: dict | None = None,
                 finite: dict | None = None) -> None:
    """Raise :class:`InternalError` unless every value of ``times`` is finite and >= 0, of ``shares`` finite in
    [0, 1] and of ``finite`` finite (None values are skipped: a percentile of no requests)."""
    import math

    def bad(rule: str, values: dict | None, ok) -> None:
        for key, value in (values or {}).items():
            if value is None:
                continue
            number = float(value)
            if not (math.isfinite(number) and ok(number)):
                raise InternalError(f"{what}: '{key}' is {value!r}, which is not {rule}", inputs)

    bad("a finite time of at least 0", times, lambda v: v >= 0)
    bad("a finite share between 0 and 1", shares, lambda v: -1e-9 <= v <= 1 + 1e-9)
    bad("a finite number", finite, lambda v: True)
