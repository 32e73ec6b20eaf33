"""Rich tables for terminal output."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from windtunnel.train.result import TrainingResult
from windtunnel.train.uncertainty import band_line

GIB = float(2**30)


def training_table(result: TrainingResult, console: Console) -> None:
    """Print a training result: headline numbers, time breakdown, memory breakdown."""
    head = Table(title=f"{result.model} on {result.devices} x {result.chip} ({result.hardware})", show_header=False)
    head.add_column("metric")
    head.add_column("value", justify="right", overflow="fold")
    head.add_row("plan", result.plan)
    if not result.feasible:
        head.add_row("[bold red]feasible[/]", f"[red]no: {result.infeasible_reason}[/]")
    else:
        head.add_row("feasible", "yes")
    head.add_row("step time", f"{result.step_time_s:.3f} s")
    head.add_row("tokens/s", f"{result.tokens_per_s:,.0f} ({result.tokens_per_s_per_device:,.1f} per device)")
    head.add_row("model TFLOP/s per device", f"{result.model_tflops_per_device:.1f}")
    head.add_row("MFU / HFU", f"{result.mfu:.1%} / {result.hfu:.1%} of {result.peak_flops_name}")
    head.add_row("peak memory", f"{result.peak_memory_bytes / GIB:.1f} GiB of {result.memory_capacity_bytes / GIB:.1f} GiB")
    head.add_row("micro-batches per step", str(result.micro_batches))
    band = band_line(result)
    if band is not None:
        head.add_row("band", band)
    console.print(head)
    times = Table(title="time breakdown (average pipeline rank)")
    times.add_column("category")
    times.add_column("seconds", justify="right")
    times.add_column("share", justify="right")
    for key, value in sorted(result.breakdown.items(), key=lambda kv: -kv[1]):
        times.add_row(key, f"{value:.3f}", f"{value / result.step_time_s:.1%}")
    memory = Table(title="memory breakdown (worst device)")
    memory.add_column("category")
    memory.add_column("GiB", justify="right")
    for key, value in result.memory_breakdown.items():
        memory.add_row(key, f"{value / GIB:.2f}")
    console.print(times)
    console.print(memory)
