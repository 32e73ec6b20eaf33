"""Efficiency profiles: the catalog's priors merged with the fitted calibration, per chip."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from windtunnel.specs.hardware import Chip
from windtunnel.specs.yamlio import catalog_dir, read_yaml


def deep_merge(base: dict, override: dict) -> dict:
    """Recursive dict merge; ``override`` wins on leaves."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@lru_cache(maxsize=1)
def _priors() -> dict:
    return read_yaml(catalog_dir("efficiency.yaml")) or {}


@lru_cache(maxsize=1)
def _fitted() -> dict:
    return (read_yaml(catalog_dir("calibration.yaml")) or {}).get("fitted") or {}


def clear_caches() -> None:
    """Forget cached profiles (after calibration rewrites calibration.yaml)."""
    _priors.cache_clear()
    _fitted.cache_clear()


@dataclass(frozen=True)
class Efficiency:
    """The efficiency numbers for one chip (fractions of peak, counts, seconds, bytes)."""

    gemm_max: dict[str, float]
    tile_m: int
    tile_n: int
    compute_units: int
    k_half: float
    attention_fwd: float
    attention_bwd: float
    attention_half_length: float
    memory_bandwidth: float
    kernel_overhead_s: float
    scale_up: float
    scale_out: float
    half_message_bytes: float
    optimizer_bytes_per_param: float
    tree_bandwidth_factor: float = 0.5
    host_op_s: float = 0.0
    host_library_call_s: float = 0.0
    host_link: float = 0.8
    overlap_comm_units: int = 0
    sources: tuple[str, ...] = ()

    def gemm_efficiency(self, precision: str) -> float:
        return self.gemm_max.get(precision, self.gemm_max.get("bf16", 0.7))


def profile_dict(chip: Chip, fitted_override: dict | None = None) -> dict[str, Any]:
    """The merged raw profile for ``chip`` (defaults <- generation <- chip <- fitted)."""
    priors = _priors()
    profile = deep_merge(priors.get("defaults", {}), (priors.get("generations") or {}).get(chip.generation, {}))
    profile = deep_merge(profile, (priors.get("chips") or {}).get(chip.id, {}))
    fitted = _fitted() if fitted_override is None else fitted_override
    profile = deep_merge(profile, (fitted.get("generations") or {}).get(chip.generation, {}))
    profile = deep_merge(profile, (fitted.get("chips") or {}).get(chip.id, {}))
    return profile


def efficiency_for(chip: Chip, fitted_override: dict | None = None) -> Efficiency:
    """The efficiency profile of ``chip``."""
    p = profile_dict(chip, fitted_override)
    gemm, attention, comm = p["gemm"], p["attention"], p["comm"]
    return Efficiency(
        gemm_max={k: float(v) for k, v in gemm["max_efficiency"].items()},
        tile_m=int(gemm["tile_m"]),
        tile_n=int(gemm["tile_n"]),
        compute_units=int(gemm["compute_units"]),
        k_half=float(gemm.get("k_half", 0.0)),
        attention_fwd=float(attention["fwd_efficiency"]),
        attention_bwd=float(attention["bwd_efficiency"]),
        attention_half_length=float(attention["half_length"]),
        memory_bandwidth=float(p["memory"]["bandwidth_efficiency"]),
        kernel_overhead_s=float(p["kernel_overhead_s"]),
        scale_up=float(comm["scale_up_efficiency"]),
        scale_out=float(comm["scale_out_efficiency"]),
        half_message_bytes=float(comm["half_message_bytes"]),
        tree_bandwidth_factor=float(comm.get("tree_bandwidth_factor", 0.5)),
        optimizer_bytes_per_param=float(p["optimizer"]["bytes_per_param"]),
        host_op_s=float((p.get("host") or {}).get("op_s", 0.0)),
        host_library_call_s=float((p.get("host") or {}).get("library_call_s", 0.0)),
        host_link=float(p["host_link_efficiency"]),
        overlap_comm_units=int(p["overlap_comm_units"]),
    )
