"""Side-by-side training results: plans, clusters, stacks or what-ifs in one table, frame and plot.

A :class:`Comparison` holds labelled :class:`~windtunnel.train.result.TrainingResult` rows; it
renders as a rich table, a pandas DataFrame (``to_frame``: one row per entry, step in seconds,
memory in bytes, breakdown in seconds per category), JSON, and a self-contained HTML plot of the
step breakdown. Units: seconds, bytes, tokens/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from windtunnel.specs.yamlio import write_atomic
from windtunnel.train.result import TrainingResult

GIB = float(2**30)
COLUMNS = ("step_time_s", "tokens_per_s", "tokens_per_s_per_device", "mfu", "peak_memory_bytes",
           "memory_capacity_bytes", "feasible")


@dataclass
class Comparison:
    """Labelled training results, in the order given."""

    entries: list[tuple[str, TrainingResult]] = field(default_factory=list)

    def to_frame(self) -> pd.DataFrame:
        """One row per entry: label, plan, hardware, framework, the headline numbers and the breakdown
        (``breakdown.<category>`` in seconds)."""
        rows = []
        for label, result in self.entries:
            row = {"label": label, "plan": result.plan, "hardware": result.hardware, "framework": result.framework}
            row.update({key: getattr(result, key) for key in COLUMNS})
            row.update({f"breakdown.{key}": value for key, value in sorted(result.breakdown.items())})
            rows.append(row)
        return pd.DataFrame(rows).set_index("label")

    def to_json_dict(self) -> dict:
        """``entries``: each with its label and the result (the `train simulate --json` contract); ``gain``:
        each entry's tokens/s over the first entry's, minus 1."""
        first = self.entries[0][1].tokens_per_s if self.entries else None
        return {"entries": [{"label": label, "gain": (result.tokens_per_s / first - 1.0) if first else None,
                             **result.to_json_dict()} for label, result in self.entries]}

    def table(self, console: Console, title: str = "comparison") -> None:
        """Print the entries as columns (metrics and breakdown shares as rows)."""
        table = Table(title=title)
        table.add_column("metric")
        for label, _ in self.entries:
            table.add_column(label, justify="right", overflow="fold")
        results = [result for _, result in self.entries]
        first = results[0]

        def row(name: str, values: list[str]) -> None:
            table.add_row(name, *values)

        row("plan", [r.plan for r in results])
        row("fits", ["yes" if r.feasible else "[red]no[/]" for r in results])
        row("step time", [f"{r.step_time_s:.3f} s" for r in results])
        row("tokens/s", [f"{r.tokens_per_s:,.0f}" for r in results])
        row("vs first", [f"{r.tokens_per_s / first.tokens_per_s - 1:+.1%}" for r in results])
        row("MFU", [f"{r.mfu:.1%}" for r in results])
        row("peak memory", [f"{r.peak_memory_bytes / GIB:.1f} of {r.memory_capacity_bytes / GIB:.0f} GiB" for r in results])
        categories = sorted({key for r in results for key in r.breakdown},
                            key=lambda key: -max(r.breakdown.get(key, 0.0) for r in results))
        for key in categories:
            row(f"  {key}", [f"{r.breakdown.get(key, 0.0):.3f} s ({r.breakdown.get(key, 0.0) / r.step_time_s:.0%})"
                             for r in results])
        console.print(table)

    def write_html(self, path: Path) -> None:
        """A self-contained HTML page: stacked step breakdown (seconds) per entry, and peak memory (GiB)."""
        import plotly.graph_objects as go
        from plotly.io import to_html

        labels = [label for label, _ in self.entries]
        results = [result for _, result in self.entries]
        categories = sorted({key for r in results for key in r.breakdown})
        breakdown = go.Figure([go.Bar(name=key, x=labels, y=[r.breakdown.get(key, 0.0) for r in results])
                               for key in categories])
        breakdown.update_layout(barmode="stack", title="step time breakdown (s)", yaxis_title="seconds")
        memory = go.Figure([go.Bar(x=labels, y=[r.peak_memory_bytes / GIB for r in results], name="peak memory")])
        memory.add_hline(y=results[0].memory_capacity_bytes / GIB, line_dash="dash", annotation_text="capacity")
        memory.update_layout(title="peak memory per device (GiB)", yaxis_title="GiB")
        body = "".join(to_html(fig, full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate((breakdown, memory)))
        write_atomic(path, f"<!doctype html><html><head><meta charset='utf-8'><title>windtunnel compare</title></head>"
                           f"<body><h1>windtunnel compare</h1>{body}</body></html>")
