"""The shipped calibration: fit GEMM and attention efficiencies on the calibration rows of the committed
training CSVs, per hardware generation and chip, and per stack calibration family.

Rows are chosen by :func:`windtunnel.validation.training.row_role` (a dense model on a single node); the
fitted values go to the package's catalog/calibration.yaml and replace the priors of
catalog/efficiency.yaml. Only the developer script validation/fit_shipped_calibration.py writes it;
users fit profiles of their own clusters (windtunnel.calibrate.fit, `calibrate training --out`).
"""

from __future__ import annotations

import dataclasses
import math

import yaml

from windtunnel.cost.efficiency import clear_caches
from windtunnel.specs.hardware import chip_names
from windtunnel.specs.stack import load_stack
from windtunnel.specs.yamlio import catalog_dir, write_atomic
from windtunnel.train.step import TrainingJob
from windtunnel.validation.training import build_job, predict_metric, row_role

DEFAULT_FAMILY = "megatron"  # calibration family whose fits are the chips' defaults

# Physically plausible ranges for fitted efficiencies: dense GEMMs sustain at most ~85% of the dense
# tensor-core peak (cuBLAS/CUTLASS published results); fused attention on long sequences reaches 35-80%
# of the 16-bit peak (FlashAttention-2 on A100 50-70%, FlashAttention-3 on H100 ~75%, FlashAttention-4
# on B200 ~70%;
# Dao 2023, Shah et al. 2024). The fit may not leave them; a weak pull towards the priors settles directions the
# calibration rows cannot tell apart.
# A kernel whose published prior lies below that range (one without the chip generation's instructions,
# e.g. pre-MLIR Triton's FlashAttention on Hopper; efficiency.yaml) may go down to KERNEL_FLOOR x its prior.
GEMM_BOUNDS = (0.30, 0.85)
ATTENTION_BOUNDS = (0.35, 0.80)
KERNEL_FLOOR = 0.5
PRIOR_WEIGHT = 0.05


def _place(fitted: dict, family: str, scope: str, key: str, profile: dict) -> dict:
    """A copy of ``fitted`` with ``profile`` at scope/key: top level for the default family, else under
    ``families.<family>``."""
    out = {"generations": dict(fitted.get("generations") or {}), "chips": dict(fitted.get("chips") or {}),
           "families": {name: {k: dict(v) for k, v in fam.items()} for name, fam in (fitted.get("families") or {}).items()}}
    target = out if family == DEFAULT_FAMILY else out["families"].setdefault(family, {"generations": {}, "chips": {}})
    target.setdefault(scope, {})[key] = profile
    return out


def _gemm_key(job: TrainingJob) -> str:
    """The GEMM efficiency a calibration row measures: 16-bit, per-tensor FP8, or block-scaled MXFP8."""
    if job.plan.precision != "fp8":
        return "bf16"
    return "mxfp8" if job.plan.fp8_recipe == "mx" else "fp8"


def _fit_group(scope: str, key: str, members: list[tuple[dict, TrainingJob]], fitted: dict,
               family: str = "megatron") -> tuple[dict, dict]:
    """Fit one group's efficiencies; returns (profile override, report)."""
    import dataclasses

    import numpy as np
    from scipy.optimize import minimize

    from windtunnel.cost.efficiency import profile_dict

    precisions = sorted({_gemm_key(job) for _, job in members})
    # The attention kernel the rows run (the stack's): the calibrated fused kernel ('flash') or a named one.
    kernels = sorted({load_stack(job.framework).kernels.attention for _, job in members} - {"unfused"})
    kernel = kernels[0] if len(kernels) == 1 else ("flash" if "flash" in kernels else "")
    flash = bool(kernel)
    prior = profile_dict(members[0][1].cluster.chip, fitted_override={} if family == DEFAULT_FAMILY else fitted)
    attention_prior = (prior.get("attention_kernels") or {}).get(kernel) or prior["attention"]
    bwd_ratio = attention_prior["bwd_efficiency"] / attention_prior["fwd_efficiency"]
    names = [f"gemm.{p}" for p in precisions] + ([f"attention.{kernel}.fwd"] if flash else [])

    def override(values) -> dict:
        gemm = {}
        for precision, value in zip(precisions, values, strict=False):
            keys = ["bf16", "fp16"] if precision == "bf16" else [precision]
            gemm.update(dict.fromkeys(keys, round(float(value), 4)))
        profile: dict = {"gemm": {"max_efficiency": gemm}}
        if flash:
            fwd = round(float(values[-1]), 4)
            fit = {"fwd_efficiency": fwd, "bwd_efficiency": round(fwd * bwd_ratio, 4)}
            profile.update({"attention": fit} if kernel == "flash" else {"attention_kernels": {kernel: fit}})
        return profile

    start = np.array([prior["gemm"]["max_efficiency"][p] for p in precisions]
                     + ([attention_prior["fwd_efficiency"]] if flash else []), dtype=float)
    kernel_prior = float(attention_prior["fwd_efficiency"])
    attention_floor = ATTENTION_BOUNDS[0] if kernel_prior >= ATTENTION_BOUNDS[0] else KERNEL_FLOOR * kernel_prior
    lower = np.array([GEMM_BOUNDS[0]] * len(precisions) + ([attention_floor] if flash else []))
    upper = np.array([GEMM_BOUNDS[1]] * len(precisions) + ([ATTENTION_BOUNDS[1]] if flash else []))

    def loss(x) -> float:
        values = np.clip(x, lower, upper)
        base = fitted if family != DEFAULT_FAMILY else {"generations": dict(fitted["generations"]), "chips": {}}
        fitted_now = _place(base, family, scope, key, override(values))
        total = 0.0
        for row, job in members:
            predicted, _ = predict_metric(row, dataclasses.replace(job, fitted_override=fitted_now))
            total += math.log(predicted / float(row["value"])) ** 2
        # A weak pull towards the priors keeps under-determined directions where the literature puts them.
        return total + PRIOR_WEIGHT * float(np.sum(np.log(values / start) ** 2))

    best = minimize(loss, start, method="Nelder-Mead", options={"xatol": 2e-3, "fatol": 1e-5, "maxiter": 300})
    values = np.clip(best.x, lower, upper)
    report = {
        "parameters": {name: round(float(v), 4) for name, v in zip(names, values, strict=True)},
        "rows": [row["id"] for row, _ in members],
        "rms_log_error": round(math.sqrt(max(best.fun, 0.0) / len(members)), 4),
    }
    return override(values), report


def calibrate(rows: list[dict], *, write: bool = True,
              sources: tuple[str, ...] = ("validation/training_runs.csv", "validation/training_runs_2.csv")) -> dict:
    """Fit efficiencies on the calibration rows: per hardware generation (all its calibration rows
    pooled, used by chips without rows of their own), then per chip that has calibration rows; first
    for the default (Megatron) calibration family, then for each other stack family that has
    calibration rows (eager PyTorch, MindSpeed, ...), on top of the default fits.

    The free parameters of a group are the GEMM efficiency of each precision its rows use and the
    flash-attention efficiency (forward; backward keeps the prior's ratio to forward), fitted jointly
    by least squares on the log error of the rows' metrics, within physical bounds and with a weak
    pull towards the priors. ``sources`` names the CSVs the rows come from (the written file's header).
    """
    calibration = [r for r in rows if r.get("hardware") in chip_names() and row_role(r, rows) == "calibration"]
    members: list[tuple[dict, TrainingJob]] = []
    for row in calibration:
        job, _, skip = build_job(row, fitted_override={})
        if job is not None and not skip:
            members.append((row, job))
    fitted: dict = {"generations": {}, "chips": {}, "families": {}}
    report: dict = {}
    families = sorted({load_stack(job.framework).calibration_family for _, job in members},
                      key=lambda name: (name != DEFAULT_FAMILY, name))
    for family in families:
        mine = [(row, job) for row, job in members if load_stack(job.framework).calibration_family == family]
        for scope, key_of in (("generations", lambda job: job.cluster.chip.generation),
                              ("chips", lambda job: job.cluster.chip.id)):
            groups: dict[str, list[tuple[dict, TrainingJob]]] = {}
            for row, job in mine:
                groups.setdefault(key_of(job), []).append((row, job))
            for key, group in sorted(groups.items()):
                if family != DEFAULT_FAMILY:
                    group = [(row, dataclasses.replace(job, fitted_override=fitted)) for row, job in group]
                profile, fit = _fit_group(scope, key, group, fitted, family)
                fitted = _place(fitted, family, scope, key, profile)
                label = f"{scope[:-1]} {key}" if family == DEFAULT_FAMILY else f"{family} {scope[:-1]} {key}"
                report[label] = fit
    if not fitted["families"]:
        del fitted["families"]
    if write:
        header = ("# Fitted efficiencies, written by the developer script `python validation/fit_shipped_calibration.py` "
                  f"({', '.join(sources)}).\n"
                  "# Fitted on calibration rows only (dense models on a single node, <= 8 devices); generations without one keep\n"
                  "# the priors of efficiency.yaml. Values replace the priors for that hardware generation; families.<name>\n"
                  "# holds the fits of a stack calibration family (stack field calibration_family) over the default ones.\n")
        body = yaml.safe_dump({"fitted": fitted, "fit_report": report}, sort_keys=True)
        write_atomic(catalog_dir("calibration.yaml"), header + body)
        clear_caches()
    return report
