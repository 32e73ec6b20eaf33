"""`windtunnel train job`: rehearse a whole training run (phases, faults, policy) for time to train,
device-hours, energy and cost. A thin layer over windtunnel.job.run; registered from cli.py with
``register(train_app)``."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def _emit_json(data: dict) -> None:
    from windtunnel.report.jsonout import dumps as strict_json

    sys.stdout.write(strict_json(data, indent=2, sort_keys=True) + "\n")


def train_job(
    model: str = typer.Option(..., help="Catalog model id, model YAML, or Hugging Face config.json."),
    hardware: str = typer.Option(..., help="Chip id (its default cluster), cluster id, or cluster YAML."),
    devices: int = typer.Option(..., help="Devices in the job."),
    tokens: str | None = typer.Option(None, help="Token budget of a one-phase job, e.g. 15.6T (with --seq-len, "
                                      "--global-batch, --plan). With --phase: the total the phases must add up to."),
    seq_len: int = typer.Option(4096, help="Sequence length (tokens) of a one-phase job."),
    global_batch: int | None = typer.Option(None, help="Global batch (sequences) of a one-phase job, and the "
                                            "default of phases that give no batch."),
    plan: str = typer.Option("", help="Plan of a one-phase job, e.g. tp=8,pp=16,vpp=7."),
    phase: list[str] = typer.Option([], help="A phase: seq=8192,tokens=15T,batch=2048,plan=tp=8,pp=16,... "
                                    "(repeatable; batch in sequences, or tokens with a tok suffix: batch=16Mtok)."),
    faults: str = typer.Option("catalog:llama3-54day", help="Fault profile: catalog:NAME (`avail profiles`) or YAML."),
    policy: str = typer.Option("restart-from-checkpoint", help="Recovery policy KIND[,key=value...] as in `avail`: "
                               "restart-from-checkpoint, in-memory-checkpoint, hot-spare, elastic-shrink."),
    checkpoint_every: str | None = typer.Option(None, help="Checkpoint interval, e.g. 30min (default: Daly's "
                                                "optimum for the job's failure rate and the plan's write time)."),
    storage_bandwidth: str | None = typer.Option(None, help="Checkpoint storage bandwidth, e.g. 2TB/s (default 2TB/s, "
                                                 "Llama 3's Tectonic)."),
    price: str | None = typer.Option(None, help="Price per device-hour, e.g. 2.5/device-hour (no default: cost is "
                                     "null without it)."),
    energy_price: str | None = typer.Option(None, help="Energy price, e.g. 0.08/kWh (added to the cost)."),
    pue: str = typer.Option("1.0", help="Power usage effectiveness (facility / IT power), e.g. 1.1."),
    idle_power: str | None = typer.Option(None, help="Idle device power as a fraction of board power, e.g. 15%."),
    device_power: str | None = typer.Option(None, help="Board power per device, e.g. 700W (default: the catalog's)."),
    framework: str = typer.Option("megatron", help="Training stack (see `train simulate --help`)."),
    profile: Path | None = typer.Option(None, help="Calibration profile of the chip (from `windtunnel calibrate`)."),
    replications: int = typer.Option(20, help="Step-simulation replications per phase (ETTR confidence interval)."),
    seed: int = typer.Option(0, help="Random seed of the step simulation."),
    timeline: Path | None = typer.Option(None, help="Write progress vs wall time of one sampled run as CSV."),
    plot: Path | None = typer.Option(None, help="Write the progress plot as SVG."),
    report: Path | None = typer.Option(None, help="Write a self-contained HTML report (totals, phases, plot)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Rehearse a whole run: time to train, device-hours, energy and cost after faults, phase by phase."""
    from windtunnel.avail.units import parse_duration
    from windtunnel.job.report import job_html, progress_svg, timeline_csv
    from windtunnel.job.run import JobInputs, Phase, job_timeline, parse_phase, rehearse_job, strip_private
    from windtunnel.job.units import (
        parse_bandwidth,
        parse_device_hour_price,
        parse_energy_price,
        parse_fraction,
        parse_power,
        parse_pue,
        parse_tokens,
    )
    from windtunnel.specs.errors import WindtunnelError
    from windtunnel.specs.yamlio import write_atomic

    if phase:
        phases = [parse_phase(text, i, default_batch=global_batch) for i, text in enumerate(phase)]
        if tokens is not None:
            want, got = parse_tokens(tokens), sum(p.tokens for p in phases)
            if abs(got / want - 1.0) > 1e-6:
                raise WindtunnelError(f"Field 'tokens' is {tokens} but the phases add up to {got:.6g} tokens; give "
                                      "matching budgets or leave --tokens out.", field="tokens")
    else:
        if tokens is None or global_batch is None:
            raise WindtunnelError("A one-phase job needs --tokens (e.g. 15.6T) and --global-batch (sequences); or give "
                                  "one --phase per phase.", field="tokens")
        phases = [Phase(name="phase1", seq_len=seq_len, tokens=parse_tokens(tokens), global_batch=global_batch,
                        plan=plan)]
    price_value, currency = parse_device_hour_price(price) if price is not None else (None, "")
    energy_value, energy_currency = parse_energy_price(energy_price) if energy_price is not None else (None, "")
    if currency and energy_currency and currency != energy_currency:
        raise WindtunnelError(f"Fields 'price' ({currency}) and 'energy-price' ({energy_currency}) are in different "
                              "currencies; give both in one.", field="energy-price")
    inp = JobInputs(
        model=model, hardware=hardware, devices=devices, faults=faults, policy=policy,
        checkpoint_every_s=parse_duration(checkpoint_every, "checkpoint-every", allow_zero=False) if checkpoint_every else None,
        storage_bandwidth_bytes_per_s=parse_bandwidth(storage_bandwidth) if storage_bandwidth is not None else None,
        price_per_device_hour=price_value, currency=currency or energy_currency, energy_price_per_kwh=energy_value,
        pue=parse_pue(pue), idle_fraction=parse_fraction(idle_power, "idle-power") if idle_power is not None else None,
        device_power_w=parse_power(device_power) if device_power is not None else None, framework=framework, profile=profile,
        replications=replications, seed=seed)
    from windtunnel.cli.progress import progress_reporter

    with progress_reporter() as progress, progress.busy("train job: rehearsing"):
        doc = rehearse_job(inp, phases)
    rows = job_timeline(doc)
    if timeline is not None:
        write_atomic(timeline, timeline_csv(rows))
    if plot is not None:
        write_atomic(plot, progress_svg(rows, doc))
    if report is not None:
        write_atomic(report, job_html(doc, rows))
    out = strip_private(doc)
    if as_json:
        _emit_json(out)
        return
    _print(out)
    for path in (timeline, plot, report):
        if path is not None:
            console.print(f"written: {path}")


def _si(value: float) -> str:
    """A large count in 4 characters or so: 2.63M, 512k, 940."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


# (header, how a phase fills it): short headers with their units so the table fits 80 columns; explained below it.
PHASE_COLUMNS = [("phase", lambda p: p["name"]), ("seq", lambda p: str(p["seq_len"])),
                 ("tokens", lambda p: p["tokens_text"]), ("step s", lambda p: f"{p['step_time_s']:.3g}"),
                 ("tok/s", lambda p: _si(p["tokens_per_s"])), ("ETTR", lambda p: f"{p['ettr']:.4f}"),
                 ("ckpt s", lambda p: f"{p['checkpoint']['write_s']:.3g}"),
                 ("every min", lambda p: f"{p['checkpoint']['every_s'] / 60:.3g}"),
                 ("wall d", lambda p: f"{p['wall_s'] / 86400:.2f}"), ("intr", lambda p: f"{p['interruptions']:.0f}")]


def _print(doc: dict) -> None:
    from rich import box

    table = Table(title=f"train job: {doc['model']} on {doc['devices']} x {doc['hardware']}, {doc['faults']}, "
                        f"{doc['policy']}", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  collapse_padding=True)
    body = [[cell(p) for _, cell in PHASE_COLUMNS] for p in doc["phases"]]
    for i, (col, _) in enumerate(PHASE_COLUMNS):
        width = max([len(col), *(len(cells[i]) for cells in body)])
        # Numbers never wrap; a long phase name folds instead.
        table.add_column(col, justify="left" if col == "phase" else "right", no_wrap=col != "phase",
                         min_width=None if col == "phase" else width, overflow="fold")
    for cells in body:
        table.add_row(*cells)
    console.print(table)
    console.print("step s: step time (s); tok/s: tokens per second; ckpt s: checkpoint write (s); every min: "
                  "checkpoint interval (min); wall d: wall time (days); intr: interruptions", markup=False)
    energy = "n/a (no board power)" if doc["energy_kwh"] is None else f"{doc['energy_kwh'] / 1e3:,.0f} MWh (PUE {doc['pue']:g})"
    cost = "null (no --price)" if doc["cost"] is None else f"{doc['cost']:,.0f} {doc['currency'] or ''}".strip()
    console.print(f"time to train {doc['time_to_train_days']:.2f} days (fault-free {doc['fault_free_time_s'] / 86400:.2f}); "
                  f"ETTR {doc['ettr']:.4f}; {doc['interruptions']:.0f} interruptions; "
                  f"{doc['device_hours'] / 1e6:.4g} M device-hours; energy {energy}; cost {cost}")
    lost = ", ".join(f"{k} {v / 3600:.0f} h" for k, v in doc["lost_seconds_by_cause"].items() if v > 1)
    console.print(f"time lost by cause: {lost}")
    for p in doc["phases"]:
        console.print(f"{p['name']}: {p['plan']}; checkpoint {p['checkpoint']['bytes'] / 1e12:.3g} TB; failure stops "
                      f"{p['blast_radius']['stops']}", markup=False)
    sys.stdout.write("".join(f"- {a}\n" for a in doc["assumptions"]))
    sys.stdout.write("".join(f"warning: {w}\n" for w in doc.get("warnings") or []))


def add_failure_ranking(document: dict, model: str, hardware: str, devices: int, faults: str, policy: str,
                        checkpoint_every: str | None, storage_bandwidth: str | None, framework: str,
                        profile: Path | None) -> None:
    """`train search --faults`: goodput after faults and both ranks on the refined plans (document['failure_aware'])."""
    from windtunnel.avail.units import parse_duration
    from windtunnel.job.run import JobInputs
    from windtunnel.job.search import rank_with_faults
    from windtunnel.job.units import parse_bandwidth

    inp = JobInputs(model=model, hardware=hardware, devices=devices, faults=faults, policy=policy,
                    checkpoint_every_s=parse_duration(checkpoint_every, "checkpoint-every", allow_zero=False)
                    if checkpoint_every else None,
                    storage_bandwidth_bytes_per_s=parse_bandwidth(storage_bandwidth) if storage_bandwidth is not None else None,
                    framework=framework, profile=profile)
    document["failure_aware"] = rank_with_faults(document, inp)


def print_failure_ranking(document: dict, out: Console) -> None:
    """The failure-aware ranking table of `train search --faults`."""
    fa = document["failure_aware"]
    table = Table(title=f"ranked by goodput after faults ({fa['faults']}, {fa['policy']})")
    for col in ("rank with faults", "rank fault-free", "plan", "tokens/s", "ETTR", "goodput tokens/s"):
        table.add_column(col, justify="left" if col == "plan" else "right", overflow="fold")
    for r in fa["ranking"]:
        table.add_row(str(r["rank_with_faults"]), str(r["rank_fault_free"]), r["plan"], f"{r['tokens_per_s']:.4g}",
                      f"{r['ettr']:.4f}", f"{r['goodput_tokens_per_s']:.4g}")
    out.print(table)
    out.print(f"best plan {'changes' if fa['best_plan_changes'] else 'does not change'} once faults count")


def register(train_app: typer.Typer) -> None:
    """Add ``train job`` to the train command group."""
    train_app.command("job")(train_job)
