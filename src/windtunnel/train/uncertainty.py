"""How far to trust one training prediction: its error band and whether it extrapolates.

The bands are data (catalog/bands.yaml, written by `windtunnel validate all --bands-out`): per slice of
published runs (training stack x chip generation/precision x dense/MoE) the 10th-90th percentile of the
step-time ratio measured / predicted on the validation rows, and the ranges of chips, stacks, sequence
lengths and device counts that slice's measured rows cover. This module only reads them: a prediction
gets the band of its slice (or of the coarser slice the file names when the slice has too few rows)
and the reasons it lies outside what was measured.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.yamlio import catalog_dir, read_yaml
from windtunnel.train.result import TrainingResult

BANDS_FILE = "bands.yaml"
ALL = "all"


def precision_class(precision: str) -> str:
    """The precision half of a calibration group: 'fp8', or '16bit' for bf16/fp16."""
    return "fp8" if precision == "fp8" else "16bit"


def group_key(generation: str, precision: str) -> str:
    """A chip generation and precision as the validator groups rows, e.g. 'hopper/16bit'."""
    return f"{generation}/{precision_class(precision)}"


def slice_key(stack: str, group: str, arch: str) -> str:
    """The finest band slice: stack x generation/precision x dense/MoE, e.g. 'nemo|hopper/fp8|dense'."""
    return f"{stack}|{group}|{arch}"


def coarse_key(group: str, arch: str) -> str:
    """The coarser slice a thin one falls back to: generation/precision x dense/MoE."""
    return f"{group}|{arch}"


def slice_label(key: str) -> str:
    """A slice key as people read it ('nemo x hopper/fp8 x dense')."""
    return " x ".join(key.split("|"))


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    doc = read_yaml(Path(path))
    entries = [doc.get(ALL)] if isinstance(doc, dict) else [None]
    if isinstance(doc, dict):
        entries += [e for level in ("slices", "groups") for e in (doc.get(level) or {}).values()]
    if not all(isinstance(e, dict) and isinstance(e.get("band"), dict) and len(e["band"].get("ratio") or []) == 2
               for e in entries):
        raise WindtunnelError(f"Bands file '{path}' must be a mapping of 'slices', 'groups' and 'all', each slice with "
                              f"a band ratio [low, high]; write it with `windtunnel validate all --bands-out {path}`.")
    return doc


def load_bands(path: str | Path | None = None) -> dict | None:
    """The bands document (catalog/bands.yaml unless ``path``); None when the catalog has none yet."""
    target = Path(path) if path is not None else catalog_dir(BANDS_FILE)
    if path is None and not target.exists():
        return None
    return _load(str(target))


def _range_reasons(subject: str, value: int, span: list | None, label: str) -> list[str]:
    """'<subject> beyond/below the validated range (max/min N) for <label>' when value leaves [min, max]."""
    if not span:
        return []
    low, high = span
    if value > high:
        return [f"{subject} beyond the validated range (max {high}) for {label}"]
    if value < low:
        return [f"{subject} below the validated range (min {low}) for {label}"]
    return []


def assess(bands: dict, *, stack: str, chip: str, generation: str, precision: str, arch: str,
           seq_len: int, devices: int, step_time_s: float | None,
           tokens_per_s: float | None) -> tuple[dict | None, dict]:
    """Band and extrapolation of one prediction.

    step_time_s in seconds, tokens_per_s in tokens/s (the prediction's point values). Returns
    (band, extrapolation): band = {step_time_band_s: [lo, hi] s, tokens_per_s_band: [lo, hi] tokens/s,
    ratio: [lo, hi] measured/predicted step time, slice, rows, fallback} (None without a step time);
    extrapolation = {extrapolating, reasons}.
    """
    group = group_key(generation, precision)
    fine_key, coarse = slice_key(stack, group, arch), coarse_key(group, arch)
    fine = (bands.get("slices") or {}).get(fine_key)
    grouped = (bands.get("groups") or {}).get(coarse)
    everything = bands[ALL]
    reasons: list[str] = []
    if chip not in (everything.get("chips") or []):
        reasons.append(f"chip {chip} has no validation rows")
    if fine is None:
        there = f" (stacks with rows there: {', '.join(grouped['stacks'])})" if grouped else ""
        reasons.append(f"no validation rows for stack {stack} on {group} {arch} models{there}")
    elif chip not in fine.get("chips", []):
        reasons.append(f"no validation rows for stack {stack} on chip {chip} (its slice has {', '.join(fine['chips'])})")
    if grouped is None:
        reasons.append(f"no validation rows of {arch} models on {group}")
    cover_key, cover = next((k, e) for k, e in ((fine_key, fine), (coarse, grouped), (ALL, everything)) if e)
    label = f"slice {slice_label(cover_key)}"
    reasons += _range_reasons(f"sequence length {seq_len}", seq_len, cover.get("seq_len"), label)
    reasons += _range_reasons(f"{devices} devices", devices, cover.get("devices"), label)
    extrapolation = {"extrapolating": bool(reasons), "reasons": reasons}
    if step_time_s is None:
        return None, extrapolation
    low, high = cover["band"]["ratio"]
    fallback = cover["band"].get("fallback")
    if cover_key != fine_key:
        fallback = f"no rows for {slice_label(fine_key)}; " + (f"{slice_label(cover_key)} has {fallback}" if fallback
                                                               else f"band of {slice_label(cover_key)}")
    band = {
        "step_time_band_s": [step_time_s * low, step_time_s * high],
        "tokens_per_s_band": None if tokens_per_s is None else [tokens_per_s / high, tokens_per_s / low],
        "ratio": [low, high],
        "slice": slice_label(cover["band"]["from"]),
        "rows": cover["band"]["rows"],
        "fallback": fallback,
    }
    return band, extrapolation


# Plan values whose kernel path no row of the validation files states yet (modelled from the kernels' published
# behaviour: graph/moe_block.py, and FP8 attention from cuDNN's timings, validation/ATTENTION_KERNELS.md): a
# prediction that uses one says it extrapolates. Field -> (values, the architectures where it runs). Drop a
# value once rows state it: the Megatron-Bridge 26.06 MoE rows' recipes (column recipe_options) run the fused
# grouped MLP and FP8 attention, so those are validated for MoE models; no dense row runs FP8 attention.
UNVALIDATED_PATHS = {"dispatcher": (("hybridep",), ("moe",)), "fp8_dispatch": (("true",), ("moe",)),
                     "fp8_attention": (("true",), ("dense",))}


def annotate(result: TrainingResult, *, generation: str, precision: str, arch: str,
             bands: dict | None = None) -> TrainingResult:
    """Fill ``result.band`` and ``result.extrapolation`` from catalog/bands.yaml (or ``bands``); a catalog
    without bands leaves both None. ``generation`` is the chip's, ``precision`` the plan's, ``arch``
    'dense' or 'moe'. The kernel paths of UNVALIDATED_PATHS the result's plan runs join the reasons."""
    doc: dict[str, Any] | None = bands if bands is not None else load_bands()
    if doc is None:
        return result
    result.band, result.extrapolation = assess(
        doc, stack=result.framework, chip=result.chip, generation=generation, precision=precision, arch=arch,
        seq_len=result.seq_len, devices=result.devices, step_time_s=result.step_time_s,
        tokens_per_s=result.tokens_per_s)
    fields = dict(part.split("=", 1) for part in result.plan.split(",") if "=" in part)
    unvalidated = [f"{name}={fields[name]}" for name, (values, archs) in UNVALIDATED_PATHS.items()
                   if fields.get(name) in values and arch in archs]
    if unvalidated:
        result.extrapolation["reasons"].append(f"plan {', '.join(unvalidated)}: no validation row runs this kernel path")
        result.extrapolation["extrapolating"] = True
    return result


def band_line(result: TrainingResult) -> str | None:
    """One human line: the band and any extrapolation reasons (None when the result has neither)."""
    band, extrapolation = result.band, result.extrapolation
    if band is None and extrapolation is None:
        return None
    parts = []
    if band is not None:
        low, high = band["step_time_band_s"]
        parts.append(f"step time {low:.3f}-{high:.3f} s (10th-90th percentile of measured/predicted over "
                     f"{band['rows']} validation rows of {band['slice']})")
        if band.get("fallback"):
            parts.append(f"fallback: {band['fallback']}")
    if extrapolation and extrapolation["extrapolating"]:
        parts.append("extrapolating: " + "; ".join(extrapolation["reasons"]))
    elif extrapolation is not None:
        parts.append("within the validated slice")
    return "; ".join(parts)
