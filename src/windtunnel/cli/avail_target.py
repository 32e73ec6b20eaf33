"""Table of `windtunnel avail target` (the trade-offs that reach a target availability)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from windtunnel.avail.units import format_duration


def _fmt(unit: str, value) -> str:
    if value is None:
        return "unreachable"
    if unit == "s":
        return format_duration(float(value))
    if unit == "nodes":
        return f"{int(value)}"
    return f"{value:.4g}"


def print_target(out: dict, console: Console) -> None:
    """Print the trade-off table, the chosen point and its re-simulation."""
    inp, base = out["inputs"], out["baseline"]
    goal = f"availability >= {out['target_availability']:.2%}" + (
        f" and ETTR >= {out['target_ettr']:.2%}" if out["target_ettr"] is not None else "")
    table = Table(title=f"avail target: {goal} on {inp['devices']} devices ({inp['faults']}, {inp['policy']}); "
                        f"given: availability {base['availability']:.3%}, ETTR {base['ettr']:.3%}")
    for col in ("knob", "given", "reaches the target at", "availability", "ETTR", "status"):
        table.add_column(col, justify="right")
    for r in out["rows"]:
        unit = r["unit"]
        status = r["status"]
        if r["knob"] == "checkpoint-every" and r.get("ettr_range_s"):
            lo, hi = r["ettr_range_s"]
            status = f"ETTR optimum; target met for {format_duration(lo)}..{format_duration(hi)}"
        elif r["knob"] == "failure-rate" and r["value"] is not None:
            status += f" ({r['per_1000_node_days']:.3g} per 1000 node-days, job MTBF {format_duration(r['job_mtbf_s'])})"
        table.add_row(r["knob"] + (f" ({unit})" if unit != "s" else ""), _fmt(unit, r["given"]), _fmt(unit, r["value"]),
                      "" if r.get("availability") is None else f"{r['availability']:.3%}",
                      "" if r.get("ettr") is None else f"{r['ettr']:.3%}", status)
    console.print(table)
    console.print("other recovery policies with these settings (Markov): " + "; ".join(
        f"{r['policy']} {r['availability']:.3%} / ETTR {r['ettr']:.3%}{' (meets)' if r['meets_target'] else ''}"
        for r in out["policies"]))
    c = out["chosen"]
    if c is None:
        console.print("no single knob reaches the target from these inputs")
    else:
        lo, hi = c["simulated_availability_ci95"]
        console.print(f"chosen (smallest change): {c['knob']} = {_fmt(c['unit'], c['value'])} {c['unit']}; re-simulated "
                      f"({c['replications']} x {format_duration(c['horizon_s'])}): availability {c['simulated_availability']:.3%} "
                      f"[{lo:.3%}, {hi:.3%}], ETTR {c['simulated_ettr']:.3%}; meets target: {c['meets_target']}")
    sys.stdout.write("".join(f"- {a}\n" for a in out["assumptions"]))
    sys.stdout.write("".join(f"warning: {w}\n" for w in out.get("warnings") or []))


def print_serve(out: dict, console: Console) -> None:
    """`avail serve --deployment`: per degraded state, its probability and Sim2Infer's SLO attainment."""
    table = Table(title=f"avail serve: {out['model']} {out['deployment']} ({out['faults']}, {out['policy']}), SLO "
                        f"{out['slo']}, attainment >= {out['target_slo_attainment']:.0%}")
    for col in ("instances lost", "probability", "SLO attainment", "goodput req/s", "meets"):
        table.add_column(col, justify="right")
    for s in out["states"]:
        table.add_row(",".join(map(str, s["instances_lost"])), f"{s['probability']:.3e}", f"{s['slo_attainment']:.2%}",
                      f"{s['goodput_requests_per_s']:.3g}", "yes" if s["meets_target"] else "no")
    console.print(table)
    lo, hi = out["fraction_time_slo_met_bounds"]
    console.print(f"SLO kept {out['fraction_time_slo_met']:.5%} of the time (bounds {lo:.5%}..{hi:.5%}); expected goodput "
                  f"{out['expected_goodput_requests_per_s']:.4g} req/s of {out['fault_free_goodput_requests_per_s']:.4g} "
                  f"fault-free (offered {out['offered_rate_requests_per_s']:.4g} req/s)")
    sys.stdout.write("".join(f"- {a}\n" for a in out["assumptions"]))
