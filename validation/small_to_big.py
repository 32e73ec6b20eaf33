"""Small to big: fit a profile on the small runs of a stack, predict its large runs. Writes validation/SMALL_TO_BIG.md.

Run: `.venv/bin/python validation/small_to_big.py` (about a minute).

The rules are fixed up front, not tuned to the rows:
- MindSpeed on Ascend 910B (validation/training_runs_2.csv, framework mindspeed): fit on the 8- and
  16-device rows, predict the rest (32 and 64 devices), as issue 13 states it.
- llm-foundry (validation/training_runs_2.csv, framework llm-foundry): a profile is per chip, so one fit
  per chip (h100-sxm, a100-40g, a100-80g) on its rows with at most 16 devices (two 8-GPU nodes, a
  cluster a user can book for calibration runs), predicting its rows with more.

Each experiment is scored against two baselines. *Shipped*: the shipped calibration (what every user
gets; it was itself fitted on the <= 8-device dense rows of these CSVs, so it already holds part of
what the small rows say); the profile is fitted over it, exactly as `windtunnel calibrate training
CSV --small 16 --out P` then `windtunnel validate training CSV --profile P` do. *Uncalibrated*: the
catalog priors alone (no fitted values, a cluster windtunnel has never seen); the profile is fitted
over the priors. The figures are medians of |error| over the large rows.

The fit's measurement scale is 5% or, where larger, the model's own misfit on the small rows
(windtunnel.calibrate.fit.DATA_SIGMA). That scaling was adopted after a first version of this report,
with the scale fixed at 5%, had been seen; so the report also shows the fixed-scale figures.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from windtunnel.calibrate.fit import fit_profile
from windtunnel.profile import Profile, overlay, shipped_fitted
from windtunnel.specs.yamlio import write_atomic
from windtunnel.validation.training import read_rows, validate_rows

HERE = Path(__file__).parent
CSV = HERE / "training_runs_2.csv"
EXPERIMENTS = [  # (label, chip, stack, small: largest device count fitted on)
    ("MindSpeed 910B", "ascend-910b", "mindspeed", 16),
    ("llm-foundry H100", "h100-sxm", "llm-foundry", 16),
    ("llm-foundry A100-40GB", "a100-40g", "llm-foundry", 16),
    ("llm-foundry A100-80GB", "a100-80g", "llm-foundry", 16),
]


@dataclass
class Outcome:
    """One experiment under one baseline."""

    label: str
    baseline: str
    profile: Profile
    big: list[str]
    before: dict[str, float]  # row id -> signed error
    after: dict[str, float]

    def median(self, errors: dict[str, float]) -> float | None:
        values = [abs(errors[i]) for i in self.big if i in errors]
        return statistics.median(values) if values else None


def _errors(rows: list[dict], ids: set[str], fitted: dict | None) -> dict[str, float]:
    return {r.id: r.error for r in validate_rows(rows, fitted_override=fitted, only=ids) if r.error is not None}


def run(rows: list[dict], label: str, chip: str, stack: str, small: int, baseline: str,
        scale_to_misfit: bool = True) -> Outcome:
    """Fit on the small rows over the baseline, score the big rows before and after."""
    base = shipped_fitted() if baseline == "shipped" else {}
    command = f"windtunnel calibrate training {CSV.name} --hardware {chip} --framework {stack} --small {small}"
    profile = fit_profile(rows, chip=chip, stack=stack, small=small, source=command, base=base,
                          scale_to_misfit=scale_to_misfit, loo=scale_to_misfit)
    big = sorted(r["id"] for r in rows if r.get("hardware") == chip and (r.get("framework") or "") == stack
                 and int(float(r["n_devices"])) > small and r["metric"] != "peak_memory_gib")
    before = _errors(rows, set(big), base)
    after = _errors(rows, set(big), overlay(base, chip, profile.identified(), stack))
    return Outcome(label, baseline, profile, big, before, after)


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def _pooled(outcomes: list[Outcome], which: str) -> float | None:
    values = [abs(getattr(o, which)[i]) for o in outcomes for i in o.big if i in getattr(o, which)]
    return statistics.median(values) if values else None


def _summary(outcomes: list[Outcome]) -> list[str]:
    """The summary table: each experiment and the pooled groups, under both baselines."""
    lines = ["| experiment | baseline | small rows fitted | large rows | before | after | after / before | halved |",
             "|---|---|---|---|---|---|---|---|"]
    for baseline in ("shipped", "uncalibrated"):
        for o in [o for o in outcomes if o.baseline == baseline]:
            lines.append(_summary_row(o.label, baseline, len(o.profile.fit["rows_used"]), len(o.big),
                                      o.median(o.before), o.median(o.after)))
        for name, members in _groups(outcomes):
            mine = [o for o in members if o.baseline == baseline]
            if len(mine) > 1:
                lines.append(_summary_row(f"**{name}**", baseline, sum(len(o.profile.fit["rows_used"]) for o in mine),
                                          sum(len(o.big) for o in mine), _pooled(mine, "before"), _pooled(mine, "after")))
    return lines


def _groups(outcomes: list[Outcome]) -> list[tuple[str, list[Outcome]]]:
    return [("MindSpeed 910B", [o for o in outcomes if o.label.startswith("MindSpeed")]),
            ("llm-foundry (all chips pooled)", [o for o in outcomes if o.label.startswith("llm-foundry")])]


def report(outcomes: list[Outcome], fixed: list[Outcome]) -> str:
    """The Markdown report."""
    lines = ["# Small to big: calibrating on small runs, predicting large ones", "",
             "Generated by `.venv/bin/python validation/small_to_big.py` from `validation/training_runs_2.csv`. "
             "Rules, baselines and method: the script's docstring; in short, a profile per chip and stack is fitted "
             "(`windtunnel calibrate training --small N`: bounded, regularised least squares of physical parameters "
             "within their bounds, unidentified ones keep their priors) on the rows with at most N devices, and "
             "the rows with more are predicted without and with it.", "",
             "## Summary (median |error| of the large rows)", "", *_summary(outcomes), "",
             "## Reading", "", *_reading(outcomes, _groups(outcomes)), "",
             "## Sensitivity: measurement scale fixed at 5%", "",
             "The same fits with the measurement scale fixed at 5% (no scaling to the model's misfit; the first "
             "version of this report):", "", *_summary(fixed), "", "## Fitted parameters", ""]
    for o in outcomes:
        applied = ", ".join(f"{p.name} {p.value:.4g} (prior {p.prior:.4g})" for p in o.profile.parameters if p.identified)
        kept = ", ".join(p.name for p in o.profile.parameters if not p.identified) or "none"
        loo = o.profile.fit.get("loo_median_abs_error")
        lines.append(f"- **{o.label}, over {o.baseline}** (rows {', '.join(o.profile.fit['rows_used'])}; leave-one-out "
                     f"median |error| {_pct(loo)}): identified {applied or 'nothing'}; not identified (priors kept): "
                     f"{kept}.")
    lines += ["", "## Large rows", "", "| experiment | row | devices | before (shipped) | after | before (uncalibrated) | "
              "after |", "|---|---|---|---|---|---|---|"]
    devices = {r["id"]: r["n_devices"] for r in read_rows(CSV)}
    for label in dict.fromkeys(o.label for o in outcomes):
        shipped = next(o for o in outcomes if o.label == label and o.baseline == "shipped")
        bare = next(o for o in outcomes if o.label == label and o.baseline == "uncalibrated")
        for i in shipped.big:
            lines.append(f"| {label} | {i} | {devices[i]} | {_pct(shipped.before.get(i), True)} | "
                         f"{_pct(shipped.after.get(i), True)} | {_pct(bare.before.get(i), True)} | "
                         f"{_pct(bare.after.get(i), True)} |")
    return "\n".join(lines) + "\n"


def _subset(outcomes: list[Outcome], ids: list[str], which: str) -> float | None:
    values = [abs(getattr(o, which)[i]) for o in outcomes for i in ids if i in getattr(o, which)]
    return statistics.median(values) if values else None


def _reading(outcomes: list[Outcome], groups) -> list[str]:
    """What the figures say, computed from them (no hand-written conclusions)."""
    rows = {r["id"]: r for r in read_rows(CSV)}
    out = []
    for name, members in groups:
        for baseline in ("shipped", "uncalibrated"):
            mine = [o for o in members if o.baseline == baseline]
            before, after = _pooled(mine, "before"), _pooled(mine, "after")
            met = before is not None and after is not None and after <= 0.5 * before
            out.append(f"- {name}, {baseline} baseline: median |error| of the large rows {_pct(before)} -> "
                       f"{_pct(after)}; the issue's target (at least halved) is {'met' if met else 'not met'}.")
        fitted = {i for o in members for i in o.profile.fit["rows_used"]}
        big = {i for o in members for i in o.big}
        moe_small = sum(rows[i].get("arch") == "moe" for i in fitted)
        moe_big = sum(rows[i].get("arch") == "moe" for i in big)
        shipped = [o for o in members if o.baseline == "shipped"]
        dense = [i for o in shipped for i in o.big if rows[i].get("arch") != "moe"]
        line = (f"- {name}: {moe_small} of the {len(fitted)} small rows and {moe_big} of the {len(big)} large rows are "
                "MoE models")
        if moe_big and not moe_small:
            line += (": no small row constrains what only MoE layers exercise (routing imbalance, expert dispatch, "
                     f"grouped GEMMs), so the fit cannot reach those rows; on the {len(dense)} dense large rows alone "
                     f"the shipped-baseline median goes {_pct(_subset(shipped, dense, 'before'))} -> "
                     f"{_pct(_subset(shipped, dense, 'after'))}")
        out.append(line + ".")
    return out


def _summary_row(label: str, baseline: str, fitted: int, big: int, before, after) -> str:
    ratio = after / before if before and after is not None else None
    halved = "n/a" if ratio is None else ("yes" if ratio <= 0.5 else "no")
    return (f"| {label} | {baseline} | {fitted} | {big} | {_pct(before)} | {_pct(after)} | "
            f"{'n/a' if ratio is None else f'{ratio:.2f}'} | {halved} |")


def main(out: Path = HERE / "SMALL_TO_BIG.md") -> None:
    rows = read_rows(CSV)
    outcomes, fixed = ([run(rows, label, chip, stack, small, baseline, scaled) for baseline in ("shipped", "uncalibrated")
                        for label, chip, stack, small in EXPERIMENTS] for scaled in (True, False))
    write_atomic(out, report(outcomes, fixed))
    sys.stdout.write(f"written: {out}\n")


if __name__ == "__main__":
    main()
