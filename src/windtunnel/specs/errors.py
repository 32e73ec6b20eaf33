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
