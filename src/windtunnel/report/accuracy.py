"""Shared pieces of the accuracy reports (training and inference validation): formats and sections."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import Any


def pct(value: float | None) -> str:
    """A signed fraction as a percentage ('' when missing)."""
    return "" if value is None else f"{value * 100:+.1f}%"


def apct(value: float | None) -> str:
    """An absolute fraction as a percentage ('' when missing)."""
    return "" if value is None else f"{value * 100:.1f}%"


def num(value: float | None) -> str:
    """A measured or predicted value with four significant digits ('' when missing)."""
    return "" if value is None else f"{value:.4g}"


def summary_lines(summary: dict) -> list[str]:
    """Headline errors and counts, with the skip reasons."""
    lines = [
        f"- validation rows predicted: {summary['n_validation']}; median |error| "
        f"**{apct(summary['median_abs_error'])}**, max |error| **{apct(summary['max_abs_error'])}**",
        f"- calibration rows predicted: {summary['n_calibration']}; median |error| "
        f"{apct(summary['calibration_median_abs_error'])}",
        f"- rows predicted: {summary['n_predicted']}; rows skipped: {summary['n_skipped']}",
    ]
    lines += [f"  - {count} x {reason}" for reason, count in sorted(summary["skipped_reasons"].items())]
    return lines


def slice_lines(title: str, results: Iterable[Any], keys: Callable[[Any], list[str]]) -> list[str]:
    """Median / max |error| of validation rows per slice (a row may belong to several)."""
    slices: dict[str, list[float]] = {}
    for r in results:
        if r.role == "validation" and r.error is not None:
            for key in keys(r):
                slices.setdefault(key, []).append(abs(r.error))
    lines = ["", f"{title} (median / max |error|, rows):", ""]
    lines += [f"- {name}: {apct(statistics.median(errors))} / {apct(max(errors))}, {len(errors)} rows"
              for name, errors in sorted(slices.items())]
    return lines


def far_off_lines(results: list, notes: dict[str, str], label: Callable[[Any], str]) -> list[str]:
    """Rows off by more than 25% with the analyst's note, then other rows that have notes."""
    far = [r for r in results if r.error is not None and abs(r.error) > 0.25]
    lines = ["", "## Where the model is far off (|error| > 25%)", ""]
    if not far:
        lines.append("No predicted row is off by more than 25%.")
    lines += [f"- **{r.id}** ({label(r)}): {notes.get(r.id, 'no analysis yet')}" for r in far]
    other = [r for r in results if r.id in notes and r not in far]
    if other:
        lines += ["", "Other rows with notes:", ""]
        lines += [f"- **{r.id}** ({r.role}, {pct(r.error)}): {notes[r.id]}" for r in other]
    return lines


def rows_lines(results: list, columns: list[tuple[str, Callable[[Any], str]]]) -> list[str]:
    """The per-row table (errors over 25% flagged) and each row's assumptions."""
    lines = ["", "## Rows", "", "| " + " | ".join(name for name, _ in columns) + " |",
             "| " + " | ".join("---" for _ in columns) + " |"]
    for r in results:
        lines.append("| " + " | ".join(cell(r) for _, cell in columns) + " |")
    lines += ["", "## Assumptions per row", ""]
    lines += [f"- **{r.id}**: " + "; ".join(r.assumptions) for r in results if r.assumptions]
    return lines


def error_cell(r: Any) -> str:
    """The signed error, flagged when over 25%."""
    flag = " **(>25%)**" if r.error is not None and abs(r.error) > 0.25 else ""
    return f"{pct(r.error)}{flag}"
