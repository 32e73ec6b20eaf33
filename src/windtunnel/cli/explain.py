"""CLI verbs that ask the wind tunnel: `train explain`, `train sensitivity`, `compare train`, and the
`--what-if` side-by-side view; a thin layer over :mod:`windtunnel.insight`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from windtunnel.specs.errors import WindtunnelError

console = Console()
GIB = float(2**30)
WHAT_IF_HELP = ("Hardware what-if KEY=VALUE (repeatable): flops, hbm_bandwidth, hbm_capacity, scale_up_bandwidth, "
                "scale_out_bandwidth, scale_up_domain, link_latency, host_overhead; VALUE is xF or a quantity with "
                "its unit (96GiB, 1.2TB/s, 5us, 72devices).")
FRAMEWORK_HELP = "Training stack id (windtunnel catalog list) or stack YAML."
PROFILE_HELP = "Calibration profile of the chip (from `windtunnel calibrate ... --out`)."
compare_app = typer.Typer(no_args_is_help=True, help="Plans, clusters, stacks or what-ifs side by side.")


def _emit_json(data: dict) -> None:
    from windtunnel.report.jsonout import dumps as strict_json

    sys.stdout.write(strict_json(data, indent=2, sort_keys=True) + "\n")


def parse_percent(text: str, field: str) -> float:
    """``10%`` -> 0.1; a bare number is an error (the unit is never guessed)."""
    match = re.match(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$", text)
    if not match or not 0.0 < float(match.group(1)) < 100.0:
        raise WindtunnelError(f"Field '{field}' is '{text}'; give a percentage between 0% and 100% with its unit, "
                              "e.g. 10%.", field=field)
    return float(match.group(1)) / 100.0


def _shares_table(document: dict, title: str) -> Table:
    table = Table(title=title)
    for name, justify in (("resource", "left"), ("share", "right"), ("seconds", "right"), ("what", "left")):
        table.add_column(name, justify=justify)
    from windtunnel.train.explain import describe

    for key, share in sorted(document["shares"].items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(key, f"{share:.1%}", f"{document['seconds'][key]:.3f}", describe(key))
    return table


def _remedy_table(document: dict) -> Table:
    table = Table(title="remedies (each simulated; best first)")
    for name in ("#", "change", "step", "gain", "memory", "effect"):
        table.add_column(name, justify="right" if name in ("#", "step", "gain", "memory") else "left",
                         overflow="fold")
    for index, remedy in enumerate(document["remedies"], start=1):
        notes = []
        if remedy["price_of_fitting"]:
            notes.append("price of fitting")
        if remedy["changes_numerics"]:
            notes.append("changes numerics")
        table.add_row(str(index), remedy["change"], f"{remedy['step_time_s']:.3f} s", f"{remedy['gain']:+.1%}",
                      f"{remedy['peak_memory_bytes'] / GIB:.1f} GiB",
                      remedy["effect"] + (f" [{'; '.join(notes)}]" if notes else ""))
    return table


def print_explain(document: dict, out: Console) -> None:
    """The explain document as text: verdict, shares, remedies and their plans."""
    out.print(f"[bold]{document['model']}[/] on {document['devices']} x {document['chip']} ({document['hardware']}), "
              f"{document['framework']}: {document['plan']}")
    for line in document["verdict"]:
        out.print(f"  verdict: {line}")
    out.print(_shares_table(document, "where the step goes (share of step time)"))
    if document["remedies"]:
        out.print(_remedy_table(document))
        for index, remedy in enumerate(document["remedies"], start=1):
            out.print(f"  {index}. --plan {remedy['plan']}", soft_wrap=True)
    else:
        out.print("no remedy found that is faster and fits (every candidate was simulated)")


def register(train_app: typer.Typer, app: typer.Typer) -> None:
    """Add `train explain`, `train sensitivity`, `infer explain` and `compare train` to the CLI."""
    from windtunnel.cli.infer import infer_app

    train_app.command("explain")(train_explain)
    train_app.command("sensitivity")(train_sensitivity)
    infer_app.command("explain")(infer_explain)
    app.add_typer(compare_app, name="compare")


def infer_explain(
    model: str = typer.Option(..., help="Catalog model id, model YAML, or Hugging Face config.json."),
    hardware: str = typer.Option(..., help="Chip id, cluster id or cluster YAML."),
    deployment: str = typer.Option(..., help="'mixed:tp=8,replicas=2' | 'prefill:ep=32,replicas=2;decode:ep=128' | "
                                   "deployment.yaml"),
    traffic: str = typer.Option(..., help="poisson:rate=..,input=..,output=.. | gamma:... | trace:path.csv"),
    slo: str = typer.Option("ttft=2s,tpot=100ms", help="SLO, e.g. ttft=2s,tpot=100ms"),
    seed: int = typer.Option(0, help="Random seed of the traffic."),
    what_if: list[str] = typer.Option([], "--what-if", help=WHAT_IF_HELP + " (host_overhead is not a serving key)"),
    top: int = typer.Option(6, help="Remedies to show."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict and remedies as JSON."),
) -> None:
    """Name what bounds TTFT and TPOT (and whether the deployment is overloaded); propose simulated changes."""
    from windtunnel.infer.explain import explain_serving

    document = explain_serving(model, hardware, deployment, traffic, slo=slo, seed=seed, what_if=what_if or None,
                               top=top)
    if as_json:
        _emit_json(document)
        return
    print_serving(document, console)
    if "variant" in document:
        console.rule(f"what-if: {document['variant']['what_if']}")
        print_serving(document["variant"], console)


def print_serving(document: dict, out: Console) -> None:
    """The serving explain document as text."""
    out.print(f"[bold]{document['model']}[/] on {document['hardware']}: {document['deployment']} "
              f"({document['devices']} devices)", soft_wrap=True)
    for line in document["verdict"]:
        out.print(f"  verdict: {line}", markup=False)
    if not document["remedies"]:
        out.print("no simulated change raised SLO goodput")
        return
    table = Table(title="remedies (each simulated; best goodput per device first)")
    for name in ("#", "change", "deployment", "devices", "goodput req/s", "TTFT p90", "TPOT p90"):
        table.add_column(name, overflow="fold")
    for index, remedy in enumerate(document["remedies"], start=1):
        table.add_row(str(index), remedy["change"], remedy["deployment"], str(remedy["devices"]),
                      f"{remedy['goodput_requests_per_s']:.2f}", f"{remedy['ttft_p90_s']:.3g} s",
                      f"{remedy['tpot_p90_s']:.3g} s")
    out.print(table)


def train_explain(
    model: str = typer.Option(..., help="Catalog model id, model YAML, or Hugging Face config.json."),
    hardware: str = typer.Option(..., help="Chip id (uses its default cluster), cluster id, or cluster YAML."),
    devices: int = typer.Option(..., help="Number of devices in the job."),
    seq_len: int = typer.Option(4096, help="Sequence length (tokens)."),
    global_batch: int = typer.Option(..., help="Global batch (sequences per step)."),
    plan: str = typer.Option("", help="Plan, e.g. tp=8,pp=16,mbs=1,recompute=selective,sp=true,zero=1"),
    moe_imbalance: float = typer.Option(1.1, help="Tokens on the busiest expert rank / the balanced share."),
    framework: str = typer.Option("megatron", help=FRAMEWORK_HELP),
    profile: Path | None = typer.Option(None, help=PROFILE_HELP),
    what_if: list[str] = typer.Option([], "--what-if", help=WHAT_IF_HELP),
    top: int = typer.Option(8, help="Remedies to show."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict and remedies as JSON."),
) -> None:
    """Name what holds the step (and whether it fits), and propose remedies, each one simulated."""
    from windtunnel.cli.progress import progress_reporter
    from windtunnel.insight import explain_training

    with progress_reporter() as progress, progress.busy("train explain"):
        document = explain_training(model, hardware, devices, seq_len=seq_len, global_batch=global_batch, plan=plan,
                                    framework=framework, profile=profile, moe_imbalance=moe_imbalance,
                                    what_if=what_if or None, top=top)
    if as_json:
        _emit_json(document)
        return
    print_explain(document, console)
    if "variant" in document:
        console.rule(f"what-if: {document['variant']['what_if']}")
        print_explain(document["variant"], console)


def train_sensitivity(
    model: str = typer.Option(..., help="Catalog model id, model YAML, or Hugging Face config.json."),
    hardware: str = typer.Option(..., help="Chip id (uses its default cluster), cluster id, or cluster YAML."),
    devices: int = typer.Option(..., help="Number of devices in the job."),
    seq_len: int = typer.Option(4096, help="Sequence length (tokens)."),
    global_batch: int = typer.Option(..., help="Global batch (sequences per step)."),
    plan: str = typer.Option("", help="Plan, e.g. tp=8,pp=16,mbs=1,recompute=selective,sp=true,zero=1"),
    moe_imbalance: float = typer.Option(1.1, help="Tokens on the busiest expert rank / the balanced share."),
    framework: str = typer.Option("megatron", help=FRAMEWORK_HELP),
    profile: Path | None = typer.Option(None, help=PROFILE_HELP),
    what_if: list[str] = typer.Option([], "--what-if", help=WHAT_IF_HELP + " Applied before varying."),
    delta: str = typer.Option("10%", help="How far each resource is varied up and down, with its unit (10%)."),
    resource: list[str] = typer.Option([], help="Resources to vary (default all what-if keys)."),
    search: bool = typer.Option(False, "--search", help="Re-search the best plan at each variant (slow)."),
    report: Path | None = typer.Option(None, help="Write an HTML report: tornado plot and the triangle."),
    as_json: bool = typer.Option(False, "--json", help="Print the elasticities as JSON."),
) -> None:
    """Elasticity of the step time to each resource: d ln(step time) / d ln(resource)."""
    from windtunnel.cli.progress import progress_reporter
    from windtunnel.insight import training_sensitivity

    with progress_reporter() as progress, progress.busy("train sensitivity"):
        document = training_sensitivity(model, hardware, devices, seq_len=seq_len, global_batch=global_batch, plan=plan,
                                        framework=framework, profile=profile, moe_imbalance=moe_imbalance,
                                        what_if=what_if or None, delta=parse_percent(delta, "delta"),
                                        resources=resource or None, search=search)
    if report is not None:
        from windtunnel.report.sensitivity_report import write_sensitivity_html

        write_sensitivity_html(document, report)
    if as_json:
        _emit_json(document)
        return
    print_sensitivity(document, console)
    if report is not None:
        console.print(f"written: {report}")


def print_sensitivity(document: dict, out: Console) -> None:
    """Elasticities as a table, largest magnitude first."""
    out.print(f"[bold]{document['model']}[/] on {document['devices']} x {document['chip']}: {document['plan']} "
              f"(step {document['step_time_s']:.3f} s, varied by +-{document['delta']:.0%})")
    table = Table(title="elasticity of step time (d ln step / d ln resource)")
    for name in ("resource", "elasticity", "kind"):
        table.add_column(name, justify="right" if name == "elasticity" else "left")
    searched = (document.get("searched") or {}).get("elasticities")
    if searched is not None:
        table.add_column("with re-search", justify="right")
    ranked = sorted(document["elasticities"].items(), key=lambda kv: (-(abs(kv[1]) if kv[1] is not None else -1), kv[0]))
    for name, value in ranked:
        cells = [name, "n/a" if value is None else f"{value:+.3f}", document["direction"][name]]
        if searched is not None:
            cells.append("n/a" if searched.get(name) is None else f"{searched[name]:+.3f}")
        table.add_row(*cells)
    out.print(table)
    corners = ", ".join(f"{k} {v:.0%}" for k, v in document["triangle"].items())
    out.print(f"triangle: {corners}; the plan fits down to {document['fits_down_to_capacity_bytes'] / GIB:.1f} GiB "
              f"per device ({document['memory_capacity_bytes'] / GIB:.1f} GiB now)")


@compare_app.command("train")
def compare_train(
    model: str = typer.Option(..., help="Catalog model id, model YAML, or Hugging Face config.json."),
    hardware: list[str] = typer.Option(..., help="Chip, cluster id or cluster YAML (repeat to compare clusters)."),
    devices: int = typer.Option(..., help="Number of devices in the job."),
    seq_len: int = typer.Option(4096, help="Sequence length (tokens)."),
    global_batch: int = typer.Option(..., help="Global batch (sequences per step)."),
    plan: list[str] = typer.Option([], help="Plan (repeat to compare plans)."),
    framework: list[str] = typer.Option([], help=FRAMEWORK_HELP + " Repeat to compare stacks."),
    what_if: list[str] = typer.Option([], "--what-if", help="A comma-separated what-if set (repeat to compare "
                                      "them; 'base' is the hardware as it is). " + WHAT_IF_HELP),
    moe_imbalance: float = typer.Option(1.1, help="Tokens on the busiest expert rank / the balanced share."),
    profile: Path | None = typer.Option(None, help=PROFILE_HELP),
    report: Path | None = typer.Option(None, help="Write an HTML plot of the breakdowns and memory."),
    as_json: bool = typer.Option(False, "--json", help="Print the entries as JSON."),
) -> None:
    """Simulate every combination of the repeated options and show them side by side."""
    from windtunnel.insight import compare_training

    sets = ["" if w.strip().lower() == "base" else w for w in what_if]
    from windtunnel.cli.progress import progress_reporter

    with progress_reporter() as progress, progress.busy("compare train"):
        comparison = compare_training(model, hardware, devices, seq_len=seq_len, global_batch=global_batch,
                                      plans=plan or None, frameworks=framework or None, what_ifs=sets or None,
                                      profile=profile, moe_imbalance=moe_imbalance)
    if report is not None:
        comparison.write_html(report)
    if as_json:
        _emit_json(comparison.to_json_dict())
        return
    comparison.table(console, title=f"{model} on {devices} devices")
    if report is not None:
        console.print(f"written: {report}")


def simulate_with_what_if(result, what_if: list[str], job: dict, as_json: bool) -> None:
    """`train simulate --what-if`: the base ``result`` and the variant of the job (``job``: the keyword arguments
    of :func:`windtunnel.insight.training_job`) side by side; JSON: ``variant`` beside the base result."""
    from windtunnel.insight import training_job
    from windtunnel.report.compare import Comparison
    from windtunnel.specs.whatif import parse_what_if
    from windtunnel.train.step import simulate
    from windtunnel.train.uncertainty import annotate
    from windtunnel.train.variant import job_variant

    what = parse_what_if(what_if)
    base_job = training_job(**job)
    variant = annotate(simulate(job_variant(base_job, what)), generation=base_job.cluster.chip.generation,
                       precision=base_job.plan.precision, arch="moe" if base_job.model.moe else "dense")
    if as_json:
        _emit_json({**result.to_json_dict(), "what_if": what.label, "variant": variant.to_json_dict()})
        return
    Comparison([("base", result), (f"what-if {what.label}", variant)]).table(console, title="base vs what-if")
