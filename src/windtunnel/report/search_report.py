"""Outputs of a plan search: rich table, CSV/Parquet table, self-contained HTML report with plots."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from windtunnel.search.html import STYLE, counts_table
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.yamlio import write_atomic

GIB = float(2**30)


def search_table(document: dict, console: Console, *, wide: bool = False) -> None:
    """Ranked plans with step time, throughput, MFU, memory and headroom, breakdown; then counts. By default
    one line per plan within 80 columns (plan keys as columns, report/plan_columns.py); ``wide``: full plans."""
    title = f"best plans: {document['model']} on {document['devices']} x {document['chip']}"
    if not wide:
        from windtunnel.report.plan_columns import narrow_plan_table

        table, footer = narrow_plan_table(title, document["plans"])
        console.print(table)
        for line in footer:
            console.print(line, markup=False, highlight=False)
        _counts(document, console)
        return
    table = Table(title=title)
    for column in ("#", "plan", "step s", "tokens/s", "MFU", "peak GiB", "headroom GiB", "largest overhead"):
        table.add_column(column, overflow="fold", justify="left" if column in ("plan", "largest overhead") else "right")
    for row in document["plans"]:
        others = {k: v for k, v in row["breakdown"].items() if k != "compute"}
        top = max(others.items(), key=lambda kv: kv[1]) if others else ("-", 0.0)
        table.add_row(str(row["rank"]), _short(row["plan"]), f"{row['step_time_s']:.3f}", f"{row['tokens_per_s']:,.0f}",
                      f"{row['mfu']:.1%}", f"{row['peak_memory_bytes'] / GIB:.1f}",
                      f"{row['memory_headroom_bytes'] / GIB:.1f}", f"{top[0]} {top[1] / row['step_time_s']:.0%}")
    console.print(table)
    _counts(document, console)


def _counts(document: dict, console: Console) -> None:
    counts = document["candidates"]
    console.print(f"candidates: {counts['enumerated']:,} enumerated, {sum(counts['pruned'].values()):,} pruned, "
                  f"{counts['screened']:,} screened, {counts['refined']} refined with the event engine")
    for reason, count in counts["pruned"].items():
        console.print(f"  pruned {count:>10,}  {reason}")
    console.print("elapsed: " + ", ".join(f"{k} {v:.2f}s" for k, v in document["elapsed_s"].items()))
    agreement = document["screen_vs_engine"]
    if agreement["median_abs_error"] is not None:
        console.print(f"screen vs engine on refined plans: median |diff| {agreement['median_abs_error']:.1%}, "
                      f"max {agreement['max_abs_error']:.1%}")
    console.print(f"Pareto front (tokens/s vs memory headroom): {len(document['pareto'])} plans")
    baseline = document.get("baseline")
    if baseline:
        note = "" if baseline["feasible"] else f" [red](infeasible: {baseline['infeasible_reason']})[/]"
        gain = baseline["gain"]
        console.print(f"baseline {baseline['plan']}: {baseline['tokens_per_s']:,.0f} tokens/s{note}; best plan "
                      f"{'+' if gain >= 0 else ''}{gain:.1%} tokens/s" if gain is not None else "no feasible plan found")


def _short(plan: str) -> str:
    from windtunnel.specs.plan import parse_plan

    return parse_plan(plan).short()


def write_table(document: dict, path: Path) -> None:
    """Ranked plans as CSV or Parquet (by extension), written atomically; each row also names the job it is a
    plan of (model, hardware, devices, seq_len, global_batch, framework), so the file stands on its own."""
    job = {key: document.get(key) for key in ("model", "hardware", "chip", "devices", "seq_len", "global_batch",
                                              "framework")}
    frame = pd.DataFrame([{**{k: v for k, v in row.items() if k != "breakdown"}, **job,
                           **{f"breakdown_{k}_s": v for k, v in row["breakdown"].items()}}
                          for row in document["plans"]])
    if path.suffix == ".csv":
        write_atomic(path, frame.to_csv(index=False))
    elif path.suffix == ".parquet":
        tmp = path.with_name(f".{path.name}.tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(tmp, index=False)
        tmp.replace(path)
    else:
        raise WindtunnelError(f"Output file '{path}' (field 'out') must end in .csv or .parquet.", field="out")


def write_html(document: dict, path: Path) -> None:
    """A self-contained HTML page: ranked table, TP x PP heatmap, Pareto front, breakdown of the best plans."""
    import plotly.graph_objects as go
    from plotly.io import to_html

    cells = {}
    for key, value in document["heatmap_tp_pp_step_time_s"].items():
        tp, pp = (int(part.split("=")[1]) for part in key.split(","))
        cells[(tp, pp)] = document["global_batch"] * document["seq_len"] / value
    tps = sorted({tp for tp, _ in cells})
    pps = sorted({pp for _, pp in cells})
    heat = go.Figure(go.Heatmap(z=[[cells.get((tp, pp)) for pp in pps] for tp in tps],
                                x=[str(p) for p in pps], y=[str(t) for t in tps], colorscale="Viridis",
                                colorbar={"title": "tokens/s"}))
    heat.update_layout(title="Best screened throughput by TP x PP", xaxis_title="PP", yaxis_title="TP")
    front = document["pareto"]
    rows = document["plans"]
    pareto = go.Figure()
    pareto.add_trace(go.Scatter(x=[r["memory_headroom_bytes"] / GIB for r in rows], y=[r["tokens_per_s"] for r in rows],
                                mode="markers", name="refined plans", text=[r["plan"] for r in rows]))
    pareto.add_trace(go.Scatter(x=[r["memory_headroom_bytes"] / GIB for r in front], y=[r["tokens_per_s"] for r in front],
                                mode="lines+markers", name="Pareto front", text=[r["plan"] for r in front]))
    pareto.update_layout(title="Throughput vs memory headroom", xaxis_title="memory headroom (GiB)",
                         yaxis_title="tokens/s")
    best = rows[:10]
    categories = sorted({k for r in best for k in r["breakdown"]})
    breakdown = go.Figure([go.Bar(name=cat, x=[f"#{r['rank']}" for r in best],
                                  y=[r["breakdown"].get(cat, 0.0) for r in best]) for cat in categories])
    breakdown.update_layout(barmode="stack", title="Step time breakdown of the best plans", yaxis_title="seconds")
    figures = [to_html(fig, full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate((heat, pareto, breakdown))]
    table_rows = "".join(
        f"<tr><td>{r['rank']}</td><td><code>{html.escape(r['plan'])}</code></td><td>{r['step_time_s']:.3f}</td>"
        f"<td>{r['tokens_per_s']:,.0f}</td><td>{r['mfu']:.1%}</td><td>{r['peak_memory_bytes'] / GIB:.1f}</td>"
        f"<td>{r['memory_headroom_bytes'] / GIB:.1f}</td></tr>" for r in rows)
    baseline = document.get("baseline")
    baseline_html = ""
    if baseline and baseline.get("gain") is not None:
        baseline_html = (f"<p>Baseline <code>{html.escape(baseline['plan'])}</code>: {baseline['tokens_per_s']:,.0f} "
                         f"tokens/s ({'feasible' if baseline['feasible'] else 'infeasible'}); best plan "
                         f"<b>{baseline['gain']:+.1%}</b> tokens/s.</p>")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>windtunnel search: {html.escape(document['model'])}</title>
{STYLE}
</head><body><h1>Plan search: {html.escape(document['model'])} on {document['devices']} x {html.escape(document['chip'])}</h1>
<p>sequence {document['seq_len']}, global batch {document['global_batch']}, precision {document['precision']}</p>
{baseline_html}<h2>Ranked plans (event engine)</h2><div class="scroll"><table><tr><th>#</th><th>plan</th><th>step s</th><th>tokens/s</th><th>MFU</th>
<th>peak GiB</th><th>headroom GiB</th></tr>{table_rows}</table></div>
<h2>Candidates</h2>{counts_table(document['candidates'])}{''.join(figures)}</body></html>"""
    write_atomic(path, page)
