"""Shared pieces of the accuracy reports (training and inference validation): formats and sections."""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.yamlio import read_text


@dataclass
class RowResult:
    """One measured row and its prediction (error is signed: (predicted - measured) / measured)."""

    id: str
    metric: str
    measured: float | None
    predicted: float | None
    error: float | None
    role: str
    status: str
    assumptions: list[str] = field(default_factory=list)
    source: str = ""
    group: str = ""
    arch: str = "dense"
    kind: str = ""
    # Training rows: the stack that ran it, whether its published plan fits in the modelled memory,
    # and what ranking and uncertainty slices group by (chip, model, sequence length, devices).
    framework: str = ""
    fits: bool | None = None
    chip: str = ""
    model: str = ""
    seq_len: int | None = None
    devices: int | None = None
    # The job as the model sees it (a digest of the built TrainingJob): rows with the same key are repeat
    # measurements of one job (another software release, another day), not two plans to rank.
    job_key: str = ""
    # The software release the row was measured with (the CSV's optional ``release`` column, e.g. a container
    # version); blank when its source names none. Ranking orders plans within one release only.
    release: str = ""

    def as_dict(self) -> dict:
        out = {"id": self.id, "metric": self.metric, "measured": self.measured, "predicted": self.predicted,
               "error": self.error, "role": self.role, "status": self.status, "assumptions": self.assumptions,
               "source": self.source, "group": self.group}
        if self.kind:
            out["kind"] = self.kind
        if self.framework:
            out.update(framework=self.framework, fits=self.fits, chip=self.chip, model=self.model,
                       seq_len=self.seq_len, devices=self.devices, arch=self.arch)
            if self.release:
                out["release"] = self.release
        return out


def read_csv_rows(path: str | Path, required: Iterable[str], schema: str) -> list[dict[str, str]]:
    """Rows of a measurement CSV; a missing file or column is one clear error naming the schema."""
    path = Path(path)
    try:
        text = read_text(path)
    except WindtunnelError as exc:
        raise WindtunnelError(f"Validation CSV not found or unreadable: '{path}'.") from exc
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise WindtunnelError(f"Validation CSV '{path}' lacks column(s) {', '.join(missing)}; expected the schema of "
                              f"{schema}.")
    return list(reader)


def summarize(results: list) -> dict:
    """Median and max absolute error on validation rows, counts, and the calibration rows' errors."""
    validation = [abs(r.error) for r in results if r.role == "validation" and r.error is not None]
    calibration = [abs(r.error) for r in results if r.role == "calibration" and r.error is not None]
    skipped: dict[str, int] = {}
    for r in results:
        if r.predicted is None:
            skipped[r.status] = skipped.get(r.status, 0) + 1
    return {
        "median_abs_error": statistics.median(validation) if validation else None,
        "max_abs_error": max(validation) if validation else None,
        "n_predicted": sum(1 for r in results if r.predicted is not None),
        "n_skipped": sum(1 for r in results if r.predicted is None),
        "n_validation": len(validation),
        "n_calibration": len(calibration),
        "calibration_median_abs_error": statistics.median(calibration) if calibration else None,
        "skipped_reasons": skipped,
    }


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


_NO_NOTE = "no analysis yet"


def far_off_placeholder() -> str:
    """What a far-off row without an analyst's note shows in a report (tests look for it)."""
    return _NO_NOTE


def far_off_lines(results: list, notes: dict[str, str], label: Callable[[Any], str]) -> list[str]:
    """Rows off by more than 25% with the analyst's note, then other rows that have notes."""
    far = [r for r in results if r.error is not None and abs(r.error) > 0.25]
    lines = ["", "## Where the model is far off (|error| > 25%)", ""]
    if not far:
        lines.append("No predicted row is off by more than 25%.")
    lines += [f"- **{r.id}** ({label(r)}): {notes.get(r.id, _NO_NOTE)}" for r in far]
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


def short_metric(metric: str) -> str:
    """A metric name abbreviated for an 80-column table (tokens_per_s_per_device -> tok/s/dev)."""
    for long, short in (("model_tflops", "TFLOP/s"), ("sec_per_", "s/"), ("prefill_", "pre "), ("decode_", "dec "),
                        ("output_", "out "), ("tokens", "tok"), ("_per_s", "/s"), ("_per_device", "/dev")):
        metric = metric.replace(long, short)
    return metric


def _short_status(r: Any) -> str:
    if r.status.startswith("skipped"):
        return "skipped"
    return "over mem" if "over memory" in r.status else "ok" if r.status == "predicted" else r.status


def rows_table(results: list, title: str, *, wide: bool = False) -> tuple[Any, list[str]]:
    """The per-row rich table and its footer lines. Narrow (default, fits 80 columns): abbreviated metrics,
    roles and statuses, explained in the footer, skip reasons listed under the table; ``wide``: full names."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=None if not wide else box.HEAVY_HEAD, pad_edge=False, show_edge=wide)
    for column in ("id", "group", "metric", "measured", "predicted", "error", "role", "status"):
        right = column in ("measured", "predicted", "error")
        table.add_column(column, justify="right" if right else "left", no_wrap=not wide and column != "status")
    footer: list[str] = []
    used: dict[str, str] = {}
    for r in results:
        metric = r.metric if wide else short_metric(r.metric)
        if metric != r.metric:
            used[metric] = r.metric
        role = r.role if wide else {"validation": "val", "calibration": "cal"}.get(r.role, r.role)
        status = r.status[:60] if wide else _short_status(r)
        table.add_row(r.id, r.group, metric, num(r.measured), num(r.predicted), pct(r.error), role, status)
    if not wide:
        if used:
            footer.append("metric: " + "; ".join(f"{k} = {v}" for k, v in sorted(used.items())))
        footer.append("role: val = validation row (scored), cal = calibration row (fitted on); status: ok = predicted, "
                      "over mem = predicted, but the published plan is over memory in the model (--wide: full text)")
        reasons: dict[str, list[str]] = {}
        for r in results:
            if r.status.startswith("skipped"):
                reasons.setdefault(r.status.removeprefix("skipped:").strip() or "skipped", []).append(r.id)
        footer += [f"skipped {', '.join(ids)}: {reason}" for reason, ids in reasons.items()]
    return table, footer


def run_validation(module: Any, kind: str, csv_path: Any, out: Any, as_json: bool, console: Any,
                   emit_json: Callable[[dict], None], *, progress: Callable[[str, int, int], None] | None = None,
                   wide: bool = False) -> None:
    """The body of `validate training|inference`: predict every row of the CSV with ``module``
    (read_rows, validate_rows, summarize, report_markdown), write the Markdown report, then print
    JSON or a table with the summary line. ``progress(phase, done, total)`` hears of each row."""
    from windtunnel.specs.yamlio import write_atomic

    rows = module.read_rows(csv_path)
    results = module.validate_rows(rows, progress=progress) if progress is not None else module.validate_rows(rows)
    summary = module.summarize(results)
    if out is not None:
        write_atomic(out, module.report_markdown(results, summary, str(csv_path)))
    if as_json:
        emit_json({"rows": [r.as_dict() for r in results], "summary": summary})
        return
    table, footer = rows_table(results, f"{kind} validation: {csv_path}", wide=wide)
    console.print(table)
    for line in footer:
        console.print(line, markup=False, highlight=False)
    median, worst = summary["median_abs_error"], summary["max_abs_error"]
    console.print(f"validation rows: {summary['n_validation']}, median |error| {apct(median) or 'n/a'}, "
                  f"max |error| {apct(worst) or 'n/a'}; calibration rows: {summary['n_calibration']}; "
                  f"predicted {summary['n_predicted']}, skipped {summary['n_skipped']}")
    if out is not None:
        console.print(f"report written to {out}")
