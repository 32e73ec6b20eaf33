"""Fit a user profile on measured training runs (the `calibrate training ... --out` verb).

A bounded, regularised least-squares fit: the residuals are the log errors of the rows' metrics
(predicted by the validation machinery with the candidate values overlaid on the chip) divided by a
stated measurement scale, plus one prior residual per parameter pulling it towards the catalog's
value (catalog priors merged with the shipped calibration) in units of a stated prior width.
Parameters are fitted in log space within their physical bounds (:data:`windtunnel.profile.PARAMETERS`).

Identifiability: at the solution, the posterior covariance (J^T J + prior precision)^-1 of the log
parameters gives their standard errors. Parameters join the identified set greedily (most informed
first) while every member's posterior standard error stays below half its prior width (the rows carry
at least three quarters of what is known about it, jointly with the other members); the rest are *not
identified*: they keep their priors, are not applied, and the fit is redone without them. The
leave-one-out error refits without each row in turn and predicts that row. The measurement scale is
DATA_SIGMA or, where larger, the model's own misfit on the rows (see DATA_SIGMA).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from windtunnel.profile import FittedParameter, Profile, overlay, prior_value, shipped_fitted
from windtunnel.specs.errors import WindtunnelError, choices_text
from windtunnel.specs.hardware import chip_names
from windtunnel.specs.stack import DEFAULT_STACK, load_stack, stack_names
from windtunnel.train.step import TrainingJob
from windtunnel.validation.training import build_job, predict_metric

# Scale of a row's log error the fit expects from measurement noise (5%: the spread of repeated
# published throughput figures of one configuration, e.g. llm-foundry's 128- vs 512-GPU rows of one
# model). It is a floor: where the model's own misfit on the rows is larger (rms log error of a first
# fit with every candidate free), that misfit is the scale (the usual reduced-chi-square scaling of
# least-squares errors), so the prior pull and identifiability follow what the model can explain.
DATA_SIGMA = 0.05
# Prior widths (log space): how far the catalog's value may plausibly be off on another cluster.
# Kernel efficiencies +-15% (driver/library versions, clocks), collectives +-25% (topology, NCCL/HCCL
# tuning), host costs a factor ~1.6 (CPU, Python, framework version).
PRIOR_SIGMA = {"gemm": 0.15, "attention": 0.15, "memory": 0.15, "comm": 0.25, "host": 0.5, "kernel_overhead_s": 0.5}
IDENTIFIED_RATIO = 0.5  # posterior stderr / prior width below which a parameter counts as identified
THROUGHPUT = ("sec_per_iter", "tokens_per_s_per_device", "model_tflops_per_device", "mfu", "hfu")


@dataclass
class Member:
    """One usable row and its job."""

    row: dict
    job: TrainingJob


def _sigma(name: str) -> float:
    return PRIOR_SIGMA.get(name.split(".")[0], 0.25)


def select_members(rows: list[dict], *, chip: str | None = None, stack: str | None = None,
                   small: int | None = None) -> tuple[list[Member], str, str, list[str]]:
    """The rows a fit uses: throughput metrics on one chip and one stack, at most ``small`` devices.
    Returns (members, chip, stack, skip notes). Rows of several chips or stacks without --hardware /
    --framework to choose are one clear error."""
    if chip is not None and chip not in chip_names():
        raise WindtunnelError(f"Field 'hardware' is '{chip}'; a profile is per catalog chip: "
                              f"{choices_text(chip_names())}.", field="hardware")
    if stack is not None and stack not in stack_names():
        raise WindtunnelError(f"Field 'framework' is '{stack}'; valid stacks: {choices_text(stack_names())}.",
                              field="framework")
    if small is not None and small < 1:
        raise WindtunnelError(f"Field 'small' is {small}; it is the largest device count a fitted row may have "
                              "(an integer >= 1).", field="small")
    chosen = []
    for row in rows:
        row = dict(row, framework=(row.get("framework") or "").strip() or stack or DEFAULT_STACK)
        if row.get("metric") not in THROUGHPUT or (chip and row.get("hardware") != chip):
            continue
        if stack is not None and row["framework"] != stack:
            continue
        devices = int(float(row.get("n_devices") or 0))
        if small is not None and devices > small:
            continue
        chosen.append(row)
    chips = sorted({r.get("hardware", "") for r in chosen})
    stacks = sorted({r["framework"] for r in chosen})
    for label, values, field in (("chips", chips, "hardware"), ("stacks", stacks, "framework")):
        if len(values) > 1:
            raise WindtunnelError(f"The rows span {label} {', '.join(values)}; a profile is per chip and stack. Pass "
                                  f"--{field} to choose one.", field=field)
    if not chosen:
        raise WindtunnelError("No row to fit: the CSVs have no throughput row (sec_per_iter, tokens_per_s_per_device, "
                              "model_tflops_per_device, mfu, hfu)" + (f" on chip '{chip}'" if chip else "")
                              + (f" with stack '{stack}'" if stack else "") + (f" with at most {small} devices" if small
                                                                              else "") + ".", field="csv")
    members, notes = [], []
    for row in chosen:
        job, _, skip = build_job(row, fitted_override=None)
        if skip or job is None:
            notes.append(f"{row['id']}: skipped ({skip})")
        else:
            members.append(Member(row, job))
    if not members:
        raise WindtunnelError("No row to fit: every selected row was skipped (" + "; ".join(notes) + ").", field="csv")
    return members, chips[0], stacks[0], notes


def candidates(members: list[Member], chip: str, stack: str) -> list[str]:
    """The parameters the rows could constrain: the GEMM efficiency of each precision they run, the
    stack's attention kernel, HBM bandwidth share, scale-up and scale-out collective efficiency, host
    time per op, and the per-expert library call where rows are MoE (and the chip's prior has one)."""
    names = sorted({f"gemm.{m.job.plan.precision}" for m in members})
    kernel = load_stack(stack).kernels.attention
    if kernel != "unfused":
        names.append(f"attention.{kernel}.fwd")
    names += ["memory.bandwidth_efficiency", "comm.scale_up_efficiency", "comm.scale_out_efficiency", "host.op_s"]
    if any(m.job.model.moe for m in members) and prior_value(chip, "host.library_call_s", stack) > 0:
        names.append("host.library_call_s")
    return names


class Fitter:
    """Predicts the members' metrics for candidate parameter values and fits them."""

    def __init__(self, members: list[Member], chip: str, stack: str, base: dict | None = None) -> None:
        self.members, self.chip, self.stack = members, chip, stack
        self.base = shipped_fitted() if base is None else base
        self.measured = [float(m.row["value"]) for m in members]
        self.data_sigma = DATA_SIGMA

    def prior(self, name: str) -> float:
        """The value ``name`` takes on the chip without the profile (catalog priors and ``base``)."""
        return prior_value(self.chip, name, self.stack, fitted=self.base)

    def values_of(self, names: list[str], z) -> dict[str, float]:
        """Parameter values from log offsets ``z``; an attention forward carries its backward at the
        prior's backward/forward ratio."""
        out = {name: self.prior(name) * math.exp(float(v)) for name, v in zip(names, z, strict=True)}
        for name in [n for n in out if n.startswith("attention.") and n.endswith(".fwd")]:
            bwd = name[:-3] + "bwd"
            out[bwd] = out[name] * self.prior(bwd) / self.prior(name)
        return out

    def predict(self, values: dict[str, float], members: list[Member] | None = None) -> list[float]:
        """Predicted metric of each member with ``values`` overlaid on the chip."""
        fitted = overlay(self.base, self.chip, values, self.stack)
        return [predict_metric(m.row, dataclasses.replace(m.job, fitted_override=fitted))[0]
                for m in (members or self.members)]

    def fit(self, names: list[str], keep: list[int] | None = None, start=None):
        """Least-squares fit of ``names`` on the members ``keep`` (all by default); returns the scipy result."""
        import numpy as np
        from scipy.optimize import least_squares

        from windtunnel.profile import PARAMETERS

        idx = list(range(len(self.members))) if keep is None else keep
        members = [self.members[i] for i in idx]
        measured = np.array([self.measured[i] for i in idx])
        priors = np.array([self.prior(n) for n in names])
        sigma = np.array([_sigma(n) for n in names])
        lo = np.log(np.array([max(PARAMETERS[n].bounds[0], 1e-3 * p) for n, p in zip(names, priors, strict=True)]) / priors)
        hi = np.log(np.array([PARAMETERS[n].bounds[1] for n in names]) / priors)
        lo, hi = np.minimum(lo, -1e-9), np.maximum(hi, 1e-9)  # a prior at its bound stays feasible

        def residuals(z):
            predicted = np.array(self.predict(self.values_of(names, z), members))
            return np.concatenate([np.log(predicted / measured) / self.data_sigma, z / sigma])

        x0 = np.zeros(len(names)) if start is None else np.clip(start, lo, hi)
        return least_squares(residuals, x0, bounds=(lo, hi), x_scale=sigma, diff_step=1e-3, xtol=1e-4, ftol=1e-6,
                             max_nfev=60 * (len(names) + 1))


def _posterior_stderr(result, sigma) -> list[float]:
    """Posterior standard errors of the log parameters from the Jacobian at the solution."""
    import numpy as np

    jac = np.array(result.jac)
    information = jac.T @ jac  # includes the prior rows (1/sigma^2 on the diagonal)
    try:
        covariance = np.linalg.inv(information)
    except np.linalg.LinAlgError:
        return list(sigma)
    return [float(math.sqrt(max(covariance[i, i], 0.0))) for i in range(len(sigma))]


def identified_set(result, names: list[str]) -> list[str]:
    """The parameters the rows identify, chosen greedily: in order of the information the rows carry
    on each alone, a parameter joins the set when, fitted jointly with those already in it (the rest
    at their priors), every member's posterior standard error stays below IDENTIFIED_RATIO times its
    prior width. Parameters the rows cannot tell apart thus yield one identified member, not none."""
    import numpy as np

    jac = np.array(result.jac)
    sigma = np.array([_sigma(n) for n in names])
    information = jac.T @ jac
    data = np.diag(information) - 1.0 / sigma**2  # the rows' share of each parameter's information
    chosen: list[int] = []
    for j in sorted(range(len(names)), key=lambda k: (-data[k], names[k])):
        trial = chosen + [j]
        try:
            covariance = np.linalg.inv(information[np.ix_(trial, trial)])
        except np.linalg.LinAlgError:
            continue
        if all(math.sqrt(max(covariance[i, i], 0.0)) < IDENTIFIED_RATIO * sigma[k] for i, k in enumerate(trial)):
            chosen = trial
    return [names[k] for k in sorted(chosen)]


def fit_profile(rows: list[dict], *, chip: str | None = None, stack: str | None = None, small: int | None = None,
                source: str = "calibrate training", inputs: list[dict] | None = None, loo: bool = True,
                base: dict | None = None, scale_to_misfit: bool = True) -> Profile:
    """Fit a profile on measured training ``rows`` (validation CSV schema); see the module docstring.
    ``base``: the fitted dict the profile overlays while fitting (None: the shipped calibration; {}:
    the catalog priors alone). ``scale_to_misfit``: False keeps the measurement scale at DATA_SIGMA."""
    import numpy as np

    members, chip_id, stack_id, notes = select_members(rows, chip=chip, stack=stack, small=small)
    fitter = Fitter(members, chip_id, stack_id, base)
    names = candidates(members, chip_id, stack_id)
    first = fitter.fit(names)
    misfit = float(np.sqrt(np.mean(np.square(first.fun[:len(members)])))) * DATA_SIGMA
    if scale_to_misfit and misfit > DATA_SIGMA:
        fitter.data_sigma = misfit
        first = fitter.fit(names, start=first.x)
    identified = identified_set(first, names)
    if identified:
        start = np.array([first.x[names.index(n)] for n in identified])
        final = fitter.fit(identified, start=start)
        final_stderr = dict(zip(identified, _posterior_stderr(final, [_sigma(n) for n in identified]), strict=True))
        values = fitter.values_of(identified, final.x)
    else:
        final, final_stderr, values = None, {}, {}
    predicted = fitter.predict(values)
    log_errors = [math.log(p / m) for p, m in zip(predicted, fitter.measured, strict=True)]
    loo_errors = _leave_one_out(fitter, identified, final) if loo and identified else []
    parameters = []
    from windtunnel.profile import PARAMETERS

    for name in names + [n for n in values if n not in names]:
        prior = fitter.prior(name)
        tied = name not in names
        ok = name in values
        err = final_stderr.get(name[:-3] + "fwd" if tied else name)
        parameters.append(FittedParameter(
            name=name, value=_sig(values.get(name, prior)), prior=_sig(prior), bounds=PARAMETERS[name].bounds,
            identified=ok, stderr=None if err is None else _sig(values[name] * err),
            source=source + (" (tied to the forward at the prior's backward/forward ratio)" if tied else "")
            + ("" if ok else " (not identified by the rows: keeps its prior)")))
    rows_used = [m.row["id"] for m in members]
    fit = {"rows_used": rows_used, "n_rows": len(rows_used), "small": small,
           "rms_log_error": round(math.sqrt(sum(e * e for e in log_errors) / len(log_errors)), 4),
           "median_abs_error": round(statistics.median(abs(math.exp(e) - 1) for e in log_errors), 4),
           "loo_median_abs_error": round(statistics.median(abs(e) for e in loo_errors), 4) if loo_errors else None,
           "data_sigma": round(fitter.data_sigma, 4), "data_sigma_floor": DATA_SIGMA, "identified_ratio": IDENTIFIED_RATIO, "skipped": notes,
           "candidates": names, "identified": identified}
    if final is not None:
        fit["optimizer"] = {"status": int(final.status), "nfev": int(final.nfev)}
    return Profile(chip=chip_id, stack=stack_id, parameters=sorted(parameters, key=lambda p: p.name),
                   inputs=list(inputs or []) + [{"kind": "training_runs", "command": source, "rows": rows_used}],
                   fit=fit)


def _leave_one_out(fitter: Fitter, names: list[str], full) -> list[float]:
    """Relative error of each row predicted by a fit on the other rows (warm-started at the full fit)."""
    n = len(fitter.members)
    if n < 2:
        return []
    errors = []
    for i in range(n):
        result = fitter.fit(names, keep=[j for j in range(n) if j != i], start=full.x)
        (predicted,) = fitter.predict(fitter.values_of(names, result.x), [fitter.members[i]])
        errors.append(predicted / fitter.measured[i] - 1.0)
    return errors


def _sig(value: float) -> float:
    """``value`` to 6 significant digits (stable YAML, no loss on microsecond-sized host costs)."""
    return float(f"{value:.6g}")
