"""HTML report of a sensitivity document: a tornado plot of the elasticities and the compute / bandwidth /
capacity triangle (plotly, self-contained). Elasticities are d ln(step time) / d ln(resource)."""

from __future__ import annotations

import html
from pathlib import Path

from windtunnel.specs.yamlio import write_atomic


def write_sensitivity_html(document: dict, path: Path) -> None:
    """Write the tornado plot (step-time change at resource -delta and +delta, in %) and the triangle."""
    import plotly.graph_objects as go
    from plotly.io import to_html

    base = document["step_time_s"]
    names = sorted((k for k, v in document["elasticities"].items() if v is not None),
                   key=lambda k: abs(document["elasticities"][k]))
    by_key: dict[str, dict[float, float]] = {}
    for row in document["variants"]:
        if row.get("step_time_s") is not None:
            by_key.setdefault(row["resource"], {})[row["factor"]] = row["step_time_s"] / base - 1.0
    tornado = go.Figure()
    for side, pick in (("resource down", min), ("resource up", max)):
        values = []
        for name in names:
            factors = by_key.get(name, {})
            values.append(100.0 * factors[pick(factors)] if factors else 0.0)
        tornado.add_trace(go.Bar(y=names, x=values, orientation="h", name=side))
    tornado.update_layout(barmode="overlay", title=f"step time change (%) at each resource -/+ (base {base:.3f} s)",
                          xaxis_title="% change of step time")
    corners = document["triangle"]
    triangle = go.Figure(go.Scatterternary(a=[corners["compute"]], b=[corners["bandwidth"]], c=[corners["capacity"]],
                                           mode="markers+text", text=[document["plan"][:40]], marker={"size": 14}))
    triangle.update_layout(title="compute / bandwidth / capacity triangle (share of summed |elasticity|)",
                           ternary={"aaxis": {"title": "compute"}, "baxis": {"title": "bandwidth"},
                                    "caxis": {"title": "capacity"}})
    body = "".join(to_html(fig, full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate((tornado, triangle)))
    title = html.escape(f"{document['model']} on {document['devices']} x {document['chip']}")
    write_atomic(path, f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
                       f"<h1>windtunnel sensitivity: {title}</h1><p>plan {html.escape(document['plan'])}</p>{body}</body></html>")
