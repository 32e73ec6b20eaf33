"""Fit per-kind efficiencies from a profiler trace against the operator graph of the same step.

The user describes the traced job as for ``train simulate`` (model, hardware, devices, sequence length,
global batch, plan, stack). The simulator's step builder gives the operators one pipeline rank runs in a
step (every layer of its chunks, forward and backward with recomputation, times the micro-batches), each
costed by :func:`windtunnel.cost.compute.compute_op_time` at the catalog's efficiencies, without the
per-kernel launch overhead (kernel durations in a trace exclude the gaps between kernels). Per kind
(GEMM, attention forward, attention backward, memory-bound) the fitted parameter is the value at which the
model's summed kernel time of that kind equals the trace's (a one-dimensional root, as the prior scaled by
the measured/model ratio would be for purely compute-bound kernels), clipped to the parameter's physical
bounds. One measured total per kind fixes one parameter exactly, so there is no held-out error; the
per-kind residuals at the priors are reported instead. The optimizer step, collectives, copies and
unclassified kernels are reported but not fitted. Launch gaps: the median gap between consecutive kernels
is reported, and fitted as ``kernel_overhead_s`` when asked (``gaps``); the device's idle time inside the
step is reported too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from windtunnel.cost.compute import compute_op_time
from windtunnel.cost.efficiency import Efficiency
from windtunnel.graph.ops import Op
from windtunnel.profile import PARAMETERS, FittedParameter, prior_value
from windtunnel.profiling.kernel_kinds import FITTED_KINDS
from windtunnel.profiling.kineto import TraceSummary
from windtunnel.train.step import TrainingJob
from windtunnel.train.step_ops import StepOps, step_compute_ops

# A measured/model ratio outside this range means the trace and the job described are not the same step
# (another micro-batch count, sequence length or parallel plan) more likely than a slow kernel.
PLAUSIBLE_RATIO = (1.0 / 3.0, 3.0)
MIN_GAPS = 20  # inter-kernel gaps needed before their median stands for the launch/tail overhead


@dataclass
class TraceFit:
    """Fitted per-kind parameters with the per-kind times behind them (seconds per step)."""

    chip: str
    stack: str
    parameters: list[FittedParameter]
    per_kind: dict[str, dict]
    rows_used: int
    idle_per_step_s: float
    median_gap_s: float | None = None
    warnings: list[str] = field(default_factory=list)

    def fit_stats(self) -> dict:
        return {"rows_used": self.rows_used, "loo_median_abs_error": None,
                "loo_reason": "one measured total per kernel kind fixes one parameter exactly: nothing is held out; "
                              "per_kind gives each kind's residual at the priors",
                "per_kind": self.per_kind, "device_idle_per_step_s": self.idle_per_step_s,
                "median_kernel_gap_s": self.median_gap_s,
                "warnings": self.warnings}


def step_ops(job: TrainingJob, rank: int = 0) -> tuple[StepOps, list[tuple[Op, int]]]:
    """The compute operators pipeline rank ``rank`` runs in one step of ``job``, each with how many times it runs
    (train.step_ops.step_compute_ops), and the step's context."""
    view = step_compute_ops(job, rank)
    return view, view.ops


def op_kind(op: Op) -> str:
    """The trace kind an operator's kernel is classified as."""
    if op.kind == "attention":
        return "attention.bwd" if op.phase == "bwd" else "attention.fwd"
    return op.kind


def kind_seconds(ops: list[tuple[Op, int]], builder: StepOps, eff: Efficiency) -> dict[str, float]:
    """Model seconds per kind for one step at efficiency ``eff``."""
    out: dict[str, float] = {}
    chip, precision = builder.chip, builder.plan.precision
    for op, count in ops:
        kind = op_kind(op)
        out[kind] = out.get(kind, 0.0) + count * compute_op_time(op, chip, eff, precision)
    return out


def _parameter_for(kind: str, builder: StepOps) -> str | None:
    if kind == "gemm":
        return f"gemm.{builder.plan.precision}"
    if kind == "memory":
        return "memory.bandwidth_efficiency"
    kernel = builder.attention_kernel
    name = f"attention.{kernel}.{kind.split('.')[1]}"
    return name if builder.flash_attention and name in PARAMETERS else None


def with_value(eff: Efficiency, name: str, value: float) -> Efficiency:
    """``eff`` with parameter ``name`` set to ``value``."""
    if name.startswith("gemm."):
        return dataclasses.replace(eff, gemm_max={**eff.gemm_max, name.split(".")[1]: value})
    if name == "memory.bandwidth_efficiency":
        return dataclasses.replace(eff, memory_bandwidth=value)
    _, kernel, phase = name.split(".")
    named = {k: (f, b) for k, f, b in eff.attention_kernels}
    if kernel in named:
        fwd, bwd = named[kernel]
        named[kernel] = (value, bwd) if phase == "fwd" else (fwd, value)
        return dataclasses.replace(eff, attention_kernels=tuple(sorted((k, f, b) for k, (f, b) in named.items())))
    return dataclasses.replace(eff, **{"attention_fwd" if phase == "fwd" else "attention_bwd": value})


def _solve(target: float, model, lo: float, hi: float) -> tuple[float, bool]:
    """The value in [lo, hi] at which the decreasing ``model(value)`` equals ``target``; (value, at a bound)."""
    from scipy.optimize import brentq

    if model(lo) <= target:
        return lo, True
    if model(hi) >= target:
        return hi, True
    return float(brentq(lambda v: model(v) - target, lo, hi, xtol=1e-6)), False


def _overhead(summary: TraceSummary, builder: StepOps, gaps: bool, source: str) -> FittedParameter:
    """kernel_overhead_s: the median gap between consecutive kernels of a stream (where the host keeps ahead of
    the device, that gap is the launch and tail cost the model charges per kernel); fitted only when asked,
    since a host-bound trace's gaps are host time, which the model charges as host.op_s instead."""
    name = "kernel_overhead_s"
    lo, hi = PARAMETERS[name].bounds
    prior = prior_value(builder.chip.id, name, builder.stack.id)
    gap = summary.median_gap_s
    if not gaps or gap is None or len(summary.gaps_s) < MIN_GAPS:
        why = "pass --gaps to fit it" if gaps is False else f"fewer than {MIN_GAPS} gaps between kernels"
        return FittedParameter(name=name, value=prior, prior=prior, bounds=(lo, hi), identified=False,
                               source=f"prior ({why}; median gap {gap if gap is None else f'{gap * 1e6:.2f} us'})")
    return FittedParameter(name=name, value=round(min(hi, max(lo, gap)), 9), prior=prior, bounds=(lo, hi),
                           identified=True, source=source + f", median of {len(summary.gaps_s)} inter-kernel gaps")


def fit_trace(summary: TraceSummary, job: TrainingJob, rank: int = 0, gaps: bool = False) -> TraceFit:
    """Fit GEMM, attention and memory-bound efficiency of ``job``'s chip to the kernels of ``summary``; with
    ``gaps``, also the per-kernel launch/tail overhead from the median gap between kernels."""
    builder, ops = step_ops(job, rank)
    chip, stack = builder.chip.id, builder.stack.id
    # Kernel durations exclude the gaps between kernels, which the model charges as kernel_overhead_s per
    # operator: the efficiencies are fitted on the durations alone.
    base = dataclasses.replace(builder.eff, kernel_overhead_s=0.0)
    prior_times = kind_seconds(ops, builder, base)
    parameters, per_kind, warnings = [], {}, []
    used = 0
    source = f"calibrate trace: {summary.path} ({summary.steps} step(s), device {summary.device}, pipeline rank {rank})"
    parameters.append(_overhead(summary, builder, gaps, source))
    for kind in FITTED_KINDS:
        measured = summary.per_step(kind)
        model_prior = prior_times.get(kind, 0.0)
        name = _parameter_for(kind, builder)
        kernels = summary.kinds[kind].count if kind in summary.kinds else 0
        row = {"measured_s": measured, "model_prior_s": model_prior, "kernels": kernels,
               "residual_at_prior": (model_prior / measured - 1.0) if measured > 0 else None}
        per_kind[kind] = row
        if name is None:
            row["note"] = "no fittable parameter for this kind in this job (unfused attention or an unlisted kernel)"
            continue
        prior = prior_value(chip, name, stack)
        lo, hi = PARAMETERS[name].bounds
        if measured <= 0 or model_prior <= 0:
            why = "the trace has no such kernels" if measured <= 0 else "the model runs no such operators"
            parameters.append(FittedParameter(name=name, value=prior, prior=prior, bounds=(lo, hi), identified=False,
                                              source=f"prior ({why})"))
            row["note"] = why
            continue

        def model(value: float, name: str = name, kind: str = kind, base: Efficiency = base) -> float:
            return kind_seconds(ops, builder, with_value(base, name, value)).get(kind, 0.0)

        value, at_bound = _solve(measured, model, lo, hi)
        base = with_value(base, name, value)
        ratio = measured / model_prior
        if not PLAUSIBLE_RATIO[0] <= ratio <= PLAUSIBLE_RATIO[1]:
            warnings.append(f"{kind}: measured {measured * 1e3:.2f} ms per step vs {model_prior * 1e3:.2f} ms modelled "
                            f"(x{ratio:.2f}); check that the job (micro-batches, seq_len, plan) is the traced step")
        if at_bound:
            warnings.append(f"{name}: the fit reaches its physical bound {value:g}; the model cannot match the "
                            "trace with this parameter alone")
        row["model_fitted_s"] = model(value)
        used += kernels
        # Step-to-step scatter of the kind's time: an efficiency scales inversely with it (compute-bound).
        spread = summary.step_spread(kind)
        parameters.append(FittedParameter(name=name, value=round(value, 4), prior=prior, bounds=(lo, hi),
                                          identified=True, stderr=None if spread is None else value * spread,
                                          source=source))
    for kind in sorted(set(summary.kinds) - set(FITTED_KINDS)):
        per_kind[kind] = {"measured_s": summary.per_step(kind), "kernels": summary.kinds[kind].count,
                          "note": "reported, not fitted"}
    if "other" in summary.kinds:
        top = sorted(summary.kinds["other"].names.items(), key=lambda kv: -kv[1])[:5]
        per_kind["other"]["top_names"] = [name for name, _ in top]
    return TraceFit(chip, stack, parameters, per_kind, used, summary.idle_per_step_s, summary.median_gap_s, warnings)
