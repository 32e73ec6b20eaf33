"""Outputs of the serving deployment search: the text table (rich) and a self-contained HTML report.

Rates are requests per second, latencies seconds (shown in ms), costs per hour in the price's currency.
"""

from __future__ import annotations

import html
from pathlib import Path

from windtunnel.search.html import STYLE, counts_table
from windtunnel.specs.yamlio import write_atomic


def _ms(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value * 1e3:,.{digits}f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def row_text(row: dict, currency: str = "") -> str:
    """One line for a result row: deployment, devices, attainment, goodput, served vs offered, overload, and the
    cost per hour (in ``currency``, the price's, '' when it was given without one)."""
    text = (f"{row['deployment']}: {row['devices']} devices, SLO attainment {row['attainment']:.1%}, goodput "
            f"{row['goodput_requests_per_s']:.3f} req/s, served {_rate(row['served_rate'])} of "
            f"{_rate(row['offered_rate'])} req/s offered")
    if row.get("speed", 1.0) != 1.0:
        text += f" (load x{row['speed']:.3g})"
    if row["overloaded"]:
        text += ", OVERLOADED"
    if row.get("cost_per_hour") is not None:
        text += f", cost {(currency + ' ') if currency else ''}{row['cost_per_hour']:,.2f}/h"
    return text


def _gain_text(gain: dict | None) -> str:
    if not gain:
        return "no winner to compare"
    parts = [f"{gain['devices_saved']:+d} devices saved" if gain["devices_saved"] else "same devices"]
    if gain["goodput"] is not None:
        parts.append(f"{gain['goodput']:+.1%} goodput")
    parts.append(f"{gain['attainment_points'] * 100:+.1f} points of attainment")
    where = "at the same offered load" if gain.get("speed", 1.0) == 1.0 else \
        f"(the best at its sustainable load x{gain['speed']:.3g}, the baseline at the offered load)"
    return ", ".join(parts) + f" {where}" + ("" if gain["baseline_meets_target"] else
                                              "; the baseline does not meet the target")


def search_table(document: dict, console, *, wide: bool = False) -> None:
    """Winners (re-simulated on the full traffic), the best of each kind, the baseline, counts and time. By default
    the table fits 80 columns (deployment last, folded; headers explained under it); ``wide``: the full table."""
    from rich import box
    from rich.table import Table

    cur = document.get("currency", "")

    console.print(f"objective: {document['objective_text']}; SLO ttft={document['slo']['ttft_s']} s, "
                  f"tpot={document['slo']['tpot_s']} s; offered {_rate(document['offered_rate'])} req/s")
    if document["deployments"]:
        table = Table(title=f"deployments of {document['model']} on <= {document['devices']} x {document['hardware']}"
                            " (re-simulated on the full traffic)")
        columns = ["#", "deployment", "dev", "SLO met", "goodput", "served/offered", "TTFT p90 ms", "TPOT p90 ms",
                   "same result"]
        if not wide:
            table.box, table.show_edge, table.pad_edge, table.padding = box.SIMPLE_HEAD, False, False, (0, 0)
            columns = ["#", "dev", "SLO met", "goodput", "served/offered", "TTFT", "TPOT", "same", "deployment"]
        for column in columns:
            table.add_column(column, overflow="fold", no_wrap=not wide and column != "deployment",
                             justify="left" if column == "deployment" else "right")
        for row in document["deployments"]:
            cells = {"#": str(row["rank"]), "deployment": row["deployment"], "dev": str(row["devices"]),
                     "SLO met": f"{row['attainment']:.1%}", "goodput": f"{row['goodput_requests_per_s']:.3f}",
                     "served/offered": f"{_rate(row['served_rate'])}/{_rate(row['offered_rate'])}"
                     + ((" OVERLOADED" if wide else " OVER") if row["overloaded"] else ""),
                     "TTFT": _ms(row["ttft_p90_s"]), "TPOT": _ms(row["tpot_p90_s"], 1),
                     "same": str(len(row.get("equivalent", [])))}
            cells.update({"TTFT p90 ms": cells["TTFT"], "TPOT p90 ms": cells["TPOT"], "same result": cells["same"]})
            table.add_row(*(cells[c] for c in columns))
        console.print(table)
        if not wide:
            console.print("dev: devices; SLO met: requests within the SLO; goodput: req/s within the SLO; "
                          "served/offered: req/s (OVER: overloaded); TTFT, TPOT: p90 in ms; same: other deployments "
                          "with the same result (--wide: full headers)", markup=False, highlight=False)
    if not document["feasible"]:
        console.print(f"[bold]{document['reason']}[/]")
    else:
        console.print("[bold]best[/]: " + row_text(document["best"], cur))
        for kind in ("colocated", "disaggregated"):
            row = document[f"best_{kind}"]
            console.print(f"best {kind}: " + (row_text(row, cur) if row else "none among the winners"))
    baseline = document.get("baseline")
    if baseline:
        if not baseline["feasible"]:
            console.print(f"baseline {baseline['deployment']}: infeasible ({baseline['reason']})")
        else:
            console.print(f"baseline {row_text(baseline, cur)}; best: {_gain_text(baseline.get('gain'))}")
    counts = document["candidates"]
    stop = "" if counts.get("screened_all", True) else \
        f" (screening stopped after {counts['stopped_at_devices']} devices: enough winners with fewer)"
    console.print(f"candidates: {counts['enumerated']:,} enumerated, {counts['screened']:,} screened{stop}, "
                  f"{counts['distinct']:,} distinct results, {counts.get('failed_on_full_traffic', 0)} winners failed "
                  f"on the full traffic; {counts['simulations']:,} simulations"
                  + "".join(f", {n} {reason}" for reason, n in counts["infeasible"].items())
                  + f"; {document['elapsed_s']:.1f} s")
    for note in document["notes"]:
        console.print(f"note: {note}")


def write_search_html(document: dict, path: str | Path) -> None:
    """A self-contained HTML report: winners table, best, baseline, attainment against devices."""
    import plotly.graph_objects as go
    from plotly.io import to_html

    cur = document.get("currency", "")

    rows = document["deployments"]
    figure = go.Figure()
    for kind in ("colocated", "disaggregated"):
        chosen = [r for r in rows if r["kind"] == kind]
        figure.add_trace(go.Scatter(x=[r["devices"] for r in chosen], y=[r["goodput_requests_per_s"] for r in chosen],
                                    mode="markers", name=kind, text=[r["deployment"] for r in chosen]))
    figure.update_layout(title="Goodput of the winners (full traffic)", xaxis_title="devices",
                         yaxis_title="goodput (req/s)")
    table = "".join(
        f"<tr><td>{r['rank']}</td><td><code>{html.escape(r['deployment'])}</code></td><td>{r['kind']}</td>"
        f"<td>{r['devices']}</td><td>{r['attainment']:.1%}</td><td>{r['goodput_requests_per_s']:.3f}</td>"
        f"<td>{_rate(r['served_rate'])} / {_rate(r['offered_rate'])}</td></tr>" for r in rows)
    best = f"<li><b>{html.escape(document['reason'])}</b></li>" if not document["feasible"] else \
        f"<li>best: {html.escape(row_text(document['best'], cur))}</li>"
    baseline = document.get("baseline")
    if baseline and baseline.get("feasible"):
        best += f"<li>baseline {html.escape(row_text(baseline, cur))}; best: {html.escape(_gain_text(baseline.get('gain')))}</li>"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>windtunnel serving search</title>
{STYLE}
</head><body><h1>Serving search: {html.escape(document['model'])} on up to {document['devices']} x
{html.escape(document['hardware'])}</h1><p>Objective: {html.escape(document['objective_text'])}. SLO: TTFT
{document['slo']['ttft_s']} s, TPOT {document['slo']['tpot_s']} s; traffic:
{html.escape(str(document['traffic']['description']))} ({document['traffic']['requests']} requests)</p>
<ul>{best}</ul><div class="scroll"><table><tr><th>#</th><th>deployment</th><th>kind</th><th>devices</th><th>SLO met</th>
<th>goodput req/s</th><th>served / offered req/s</th></tr>{table}</table></div>
<h2>Candidates</h2>{counts_table(document['candidates'])}
{to_html(figure, full_html=False, include_plotlyjs=True)}</body></html>"""
    write_atomic(path, page)
