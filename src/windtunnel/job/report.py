"""The job rehearsal as CSV (progress vs wall time), SVG (the same as a plot) and a self-contained HTML page."""

from __future__ import annotations

import html
import io

from windtunnel.job.units import format_tokens

_STATE_COLOUR = {"detection": "#e6a23c", "waiting_for_repair": "#c0392b", "restart": "#d35400"}


def timeline_csv(rows: list[dict]) -> str:
    """Progress of the sampled run: t_s, phase, state, worst_state, useful_throughput (fraction of fault-free), tokens."""
    buf = io.StringIO()
    buf.write("t_s,phase,state,worst_state,useful_throughput,tokens\n")
    for r in rows:
        buf.write(f"{r['t_s']:.6g},{r['phase']},{r['state']},{r['worst_state']},{r['useful_throughput']:.6g},"
                  f"{r['tokens']:.6g}\n")
    return buf.getvalue()


def progress_svg(rows: list[dict], doc: dict, width: int = 900, height: int = 300) -> str:
    """Tokens trained vs wall time (days), with the fault-free line and a tick for each bin that held an
    interruption (detection, waiting for repair, restart)."""
    pad = 50
    t_end = max(doc["time_to_train_s"], 1.0)
    total = max(doc["tokens"], 1.0)

    def xy(t: float, tok: float) -> str:
        return f"{pad + (width - 2 * pad) * t / t_end:.1f},{height - pad - (height - 2 * pad) * tok / total:.1f}"

    pts = " ".join(xy(r["t_s"], r["tokens"]) for r in rows)
    ideal, t, done = [xy(0.0, 0.0)], 0.0, 0.0
    for p in doc["phases"]:
        t += p["fault_free_time_s"]
        done += p["tokens"]
        ideal.append(xy(t, done))
    ticks = "".join(f'<line x1="{xy(r["t_s"], 0).split(",")[0]}" y1="{height - pad}" x2="{xy(r["t_s"], 0).split(",")[0]}" '
                    f'y2="{height - pad + 8}" stroke="{_STATE_COLOUR[r["worst_state"]]}"/>'
                    for r in rows if r["worst_state"] in _STATE_COLOUR)
    title = html.escape(f"{doc['model']} on {doc['devices']} x {doc['hardware']}: tokens trained vs wall time "
                        f"({doc['faults']}, {doc['policy']})")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
            f'font-size="12"><text x="{pad}" y="20">{title}</text>'
            f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>'
            f'<text x="5" y="{pad + 4}">{format_tokens(total)}</text><text x="{pad - 12}" y="{height - pad + 4}">0</text>'
            f'<text x="{width - pad - 80}" y="{height - 12}">{t_end / 86400:.3g} days</text>'
            f'<polyline fill="none" stroke="#999" stroke-dasharray="4 3" points="{" ".join(ideal)}"/>'
            f'<polyline fill="none" stroke="steelblue" stroke-width="1.5" points="{pts}"/>{ticks}'
            f'<text x="{pad + 10}" y="{pad + 10}" fill="#999">dashed: fault-free; blue: one sampled run; ticks: '
            'interruptions</text></svg>\n')


def job_html(doc: dict, rows: list[dict]) -> str:
    """A self-contained HTML report of the rehearsal: totals, phases, time lost by cause, the progress plot."""
    def cell(v) -> str:
        return f"<td>{html.escape(str(v))}</td>"

    totals = [("time to train", f"{doc['time_to_train_days']:.2f} days"),
              ("fault-free time", f"{doc['fault_free_time_s'] / 86400:.2f} days"), ("ETTR", f"{doc['ettr']:.4f}"),
              ("interruptions (expected)", f"{doc['interruptions']:.0f}"),
              ("device-hours", f"{doc['device_hours'] / 1e6:.4g} M"),
              ("energy", "n/a" if doc["energy_kwh"] is None else f"{doc['energy_kwh'] / 1e3:.4g} MWh"),
              ("cost", "n/a (no price given)" if doc["cost"] is None else f"{doc['cost']:.4g} {doc['currency'] or ''}")]
    phase_rows = "".join(
        "<tr>" + "".join(cell(v) for v in (p["name"], p["seq_len"], p["tokens_text"], p["plan"], f"{p['step_time_s']:.3g} s",
                                           f"{p['tokens_per_s']:.4g}", f"{p['ettr']:.4f}", f"{p['wall_s'] / 86400:.2f} d",
                                           f"{p['checkpoint']['write_s']:.3g} s", f"{p['checkpoint']['every_s']:.4g} s"))
        + "</tr>" for p in doc["phases"])
    lost = "".join(f"<tr>{cell(k)}{cell(f'{v / 3600:.1f} h')}</tr>" for k, v in doc["lost_seconds_by_cause"].items())
    assumptions = "".join(f"<li>{html.escape(a)}</li>" for a in doc["assumptions"])
    return ("<!doctype html><html><head><meta charset='utf-8'><title>windtunnel train job</title>"
            "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
            ".scroll{overflow-x:auto;max-width:100%}</style></head><body>"
            f"<h1>Job rehearsal: {html.escape(doc['model'])} on {doc['devices']} x {html.escape(doc['hardware'])}</h1>"
            "<table>" + "".join(f"<tr><th align=left>{k}</th>{cell(v)}</tr>" for k, v in totals) + "</table>"
            "<h2>Progress</h2>" + progress_svg(rows, doc) +
            "<h2>Phases</h2><div class='scroll'><table><tr><th>phase</th><th>seq</th><th>tokens</th><th>plan</th><th>step</th>"
            "<th>tokens/s</th><th>ETTR</th><th>wall</th><th>checkpoint write</th><th>checkpoint every</th></tr>"
            + phase_rows + "</table></div><h2>Time lost by cause</h2><table>" + lost + "</table>"
            "<h2>Assumptions</h2><ul>" + assumptions + "</ul></body></html>\n")
