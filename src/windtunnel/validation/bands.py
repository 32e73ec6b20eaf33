"""Error bands from the validation residuals (catalog/bands.yaml, `windtunnel validate all --bands-out`).

A row's residual is its step-time ratio measured / predicted: for a step-time metric (sec_per_iter)
measured / predicted directly; for a throughput metric (tokens/s, TFLOP/s, MFU, HFU per device) the
inverse, predicted / measured (a throughput is a fixed amount of work over the step time). Per slice
(training stack x chip generation/precision x dense/MoE) the band is the 10th-90th percentile of the
validation rows' ratios, widened to contain 1 (the point prediction itself). A slice with fewer than
MIN_ROWS validation rows takes the band of generation/precision x dense/MoE, then of all rows, and says
so. Every slice also records what its measured rows (validation and calibration) cover: chips,
stacks, sequence lengths and device counts, which is what train/uncertainty checks a job against.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from windtunnel.train.uncertainty import ALL, coarse_key, slice_key
from windtunnel.validation.rows import RowResult

MIN_ROWS = 5
QUANTILES = (0.10, 0.90)
STEP_TIME_METRICS = ("sec_per_iter",)
THROUGHPUT_METRICS = ("tokens_per_s_per_device", "model_tflops_per_device", "mfu", "hfu")


def step_time_ratio(r: RowResult) -> float | None:
    """Measured / predicted step time of a row (None for other metrics or a row without both values)."""
    if not (r.measured and r.predicted) or r.measured <= 0 or r.predicted <= 0:
        return None
    if r.metric in STEP_TIME_METRICS:
        return r.measured / r.predicted
    if r.metric in THROUGHPUT_METRICS:
        return r.predicted / r.measured
    return None


def quantile(values: Iterable[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _entry(members: list[tuple[str, RowResult]], *, ids: bool = False) -> dict[str, Any]:
    """What one slice's measured rows cover, and its own residual statistics (with ``ids``: the
    validation rows' names, which the finest slices list so that every row is named once)."""
    ratios = [step_time_ratio(r) for _, r in members if r.role == "validation"]
    ratios = [x for x in ratios if x is not None]
    seqs = [r.seq_len for _, r in members if r.seq_len]
    devices = [r.devices for _, r in members if r.devices]
    entry: dict[str, Any] = {
        "stacks": sorted({r.framework for _, r in members if r.framework}),
        "chips": sorted({r.chip for _, r in members if r.chip}),
        "seq_len": [min(seqs), max(seqs)] if seqs else None,
        "devices": [min(devices), max(devices)] if devices else None,
        "validation_rows": len(ratios),
        "calibration_rows": sum(1 for _, r in members if r.role == "calibration"),
    }
    if ids:
        entry["row_ids"] = [name for name, r in members if r.role == "validation" and step_time_ratio(r) is not None]
    if ratios:
        entry["own"] = {"median_ratio": round(quantile(ratios, 0.5), 4),
                        "percentiles": [round(quantile(ratios, q), 4) for q in QUANTILES]}
    return entry


def _own_band(key: str, entry: dict) -> dict:
    low, high = entry["own"]["percentiles"]
    return {"ratio": [round(min(low, 1.0), 4), round(max(high, 1.0), 4)], "rows": entry["validation_rows"],
            "from": key, "fallback": None}


def derive_bands(files: Iterable[tuple[str, list[RowResult]]]) -> dict[str, Any]:
    """Bands per slice from (csv path, results) pairs; rows are named 'csv-name:id'. Only step-time-like
    metrics of predicted rows count (peak memory rows and skipped rows do not)."""
    rows = [(f"{name_of(path)}:{r.id}", r) for path, results in files for r in results
            if r.predicted is not None and r.metric in STEP_TIME_METRICS + THROUGHPUT_METRICS]
    fine: dict[str, list] = {}
    coarse: dict[str, list] = {}
    for name, r in rows:
        fine.setdefault(slice_key(r.framework, r.group, r.arch), []).append((name, r))
        coarse.setdefault(coarse_key(r.group, r.arch), []).append((name, r))
    everything = _entry(rows)
    if everything["validation_rows"]:
        everything["band"] = _own_band(ALL, everything)
    else:
        everything["band"] = {"ratio": [1.0, 1.0], "rows": 0, "from": ALL,
                              "fallback": "no validation rows at all: a zero-width band"}
    if 0 < everything["validation_rows"] < MIN_ROWS:
        everything["band"]["fallback"] = f"only {everything['validation_rows']} validation rows in all"
    groups: dict[str, dict] = {}
    for key, members in sorted(coarse.items()):
        entry = _entry(members)
        if entry["validation_rows"] >= MIN_ROWS:
            entry["band"] = _own_band(key, entry)
        else:
            entry["band"] = {**everything["band"], "fallback": f"{entry['validation_rows']} validation rows (< "
                             f"{MIN_ROWS}): band of all rows ({everything['band']['rows']} rows)"}
        groups[key] = entry
    slices: dict[str, dict] = {}
    for key, members in sorted(fine.items()):
        entry = _entry(members, ids=True)
        parent = groups[coarse_key(members[0][1].group, members[0][1].arch)]
        if entry["validation_rows"] >= MIN_ROWS:
            entry["band"] = _own_band(key, entry)
        else:
            source = parent["band"]
            where = source["from"].replace("|", " x ")
            entry["band"] = {**source, "fallback": f"{entry['validation_rows']} validation rows (< {MIN_ROWS}): band "
                             f"of {where} ({source['rows']} rows)"}
        slices[key] = entry
    return {"min_rows": MIN_ROWS, "quantiles": list(QUANTILES), "slices": slices, "groups": groups, ALL: everything}


class _PlainDumper(yaml.SafeDumper):
    """A safe dumper that writes shared values out each time instead of as YAML anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def bands_yaml(doc: dict, sources: list[tuple[str, int]], command: str) -> str:
    """The bands document as YAML, with a header saying how and from which rows it was generated.
    ``sources``: (csv path, validation rows used) per file."""
    used = ", ".join(f"{path} ({n} validation rows)" for path, n in sources)
    header = [
        f"# Error bands of training predictions, generated by `{command}`.",
        "# Do not edit by hand: rerun the command (make validate) after the model or the CSVs change.",
        f"# From the validation rows of: {used}.",
        "# ratio = measured / predicted step time (throughput rows: predicted / measured); band.ratio = the",
        f"# {QUANTILES[0]:.0%}-{QUANTILES[1]:.0%} percentile of a slice's validation ratios, widened to contain 1.",
        f"# Slices (stack|generation/precision|arch) with < {MIN_ROWS} validation rows take the band of their group",
        "# (generation/precision|arch), groups with too few take the band of all rows; band.fallback says so.",
        "# row_ids (finest slices): the validation rows behind each slice's own statistics.",
        "# chips, stacks, seq_len and devices: what the slice's measured rows (validation and calibration) cover;",
        "# train/uncertainty.py reports a job outside them as extrapolating.",
    ]
    return "\n".join(header) + "\n" + yaml.dump(doc, Dumper=_PlainDumper, sort_keys=True, width=120,
                                                 default_flow_style=None)



def sources_of(files: Iterable[tuple[str, list[RowResult]]]) -> list[tuple[str, int]]:
    """(csv path, validation rows with a step-time ratio) per file, for the header."""
    return [(str(path), sum(1 for r in results if r.role == "validation" and step_time_ratio(r) is not None))
            for path, results in files]


def name_of(path: str | Path) -> str:
    """The short name rows are labelled with ('training_runs.csv')."""
    return Path(path).name
