"""Efficiency profiles: the catalog's priors merged with the fitted calibration, per chip."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.hardware import Chip
from windtunnel.specs.yamlio import catalog_dir, deep_merge, read_yaml


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
    attention_fp8_ratio: float = 0.85  # FP8 attention's share of the 16-bit kernel's fraction of peak
    # Whether the FP8 attention backward skips the keys outside a sliding window, as the 16-bit kernel does;
    # False: it computes every causal score of a windowed call (efficiency.yaml attention.fp8_backward_skips_window).
    attention_fp8_bwd_skips_window: bool = True
    host_op_s: float = 0.0
    host_library_call_s: float = 0.0
    host_launch_s: float = 0.0  # host seconds per kernel launch from library C++ code (no framework op)
    host_link: float = 0.8
    host_memory: float = 0.75  # sustained share of host DRAM bandwidth (a CPU optimizer step)
    overlap_comm_units: int = 0
    unvectorized_bandwidth: float = 0.45
    # Named attention kernels with published efficiencies on this chip's generation:
    # (name, forward max, backward max); other kernels run at the calibrated fused kernel's.
    attention_kernels: tuple[tuple[str, float, float], ...] = ()
    sources: tuple[str, ...] = ()

    def gemm_efficiency(self, precision: str) -> float:
        return self.gemm_max.get(precision, self.gemm_max.get("bf16", 0.7))

    def for_fp8_recipe(self, recipe: str) -> Efficiency:
        """This profile as a plan of FP8 recipe ``recipe`` runs its FP8 GEMMs. Block-scaled MXFP8 ('mx': 1x32
        scales, block-scaled tensor-core MMA) is its own kernel family, with its own calibrated efficiency
        (``gemm.max_efficiency.mxfp8``) in place of per-tensor FP8's; 'tensor' leaves the profile as it is."""
        if recipe != "mx":
            return self
        return replace(self, gemm_max={**self.gemm_max, "fp8": self.gemm_max.get("mxfp8", self.gemm_efficiency("fp8"))})

    def attention_max(self, kernel: str, backward: bool) -> float:
        """Maximum efficiency (fraction of the 16-bit peak) of attention kernel ``kernel``."""
        for name, fwd, bwd in self.attention_kernels:
            if name == kernel:
                return bwd if backward else fwd
        return self.attention_bwd if backward else self.attention_fwd


def profile_dict(chip: Chip, fitted_override: dict | None = None, family: str = "",
                 fp8_of_bf16: float | None = None) -> dict[str, Any]:
    """The merged raw profile for ``chip`` (defaults <- generation <- chip <- fitted), then, for a stack
    whose calibration ``family`` has fits of its own (kernels a stack family runs, e.g. eager PyTorch's
    cuBLAS calls vs Transformer Engine's), that family's generation and chip fits.

    ``fp8_of_bf16`` (stack kernels.fp8_gemm_of_bf16): where the family fitted its 16-bit GEMMs on this chip
    but not its FP8 ones, FP8 runs at that fit times this ratio instead of the default family's FP8 fit."""
    priors = _priors()
    profile = deep_merge(priors.get("defaults", {}), (priors.get("generations") or {}).get(chip.generation, {}))
    profile = deep_merge(profile, (priors.get("chips") or {}).get(chip.id, {}))
    fitted = _fitted() if fitted_override is None else fitted_override
    generation_fit = (fitted.get("generations") or {}).get(chip.generation, {})
    chip_fit = (fitted.get("chips") or {}).get(chip.id, {})
    profile = deep_merge(profile, generation_fit)
    profile = deep_merge(profile, chip_fit)
    factor = _sustained_factor(chip, fitted)
    if factor < 1.0:
        fitted_precisions = set(_gemm_fit(generation_fit)) | set(_gemm_fit(chip_fit))
        gemm = profile["gemm"]["max_efficiency"]
        for precision in list(gemm):
            if precision not in fitted_precisions:
                gemm[precision] = round(float(gemm[precision]) * factor, 4)
    own = ((fitted.get("families") or {}).get(family) or {}) if family else {}
    own_generation = (own.get("generations") or {}).get(chip.generation, {})
    own_chip = (own.get("chips") or {}).get(chip.id, {})
    profile = deep_merge(deep_merge(profile, own_generation), own_chip)
    own_gemm = {**_gemm_fit(own_generation), **_gemm_fit(own_chip)}
    if fp8_of_bf16 is not None and "bf16" in own_gemm and "fp8" not in own_gemm:
        # The family's own kernels in the other precision, at the ratio measured on them, rather than
        # another family's FP8 fit (which carries that family's casts and kernels).
        profile["gemm"]["max_efficiency"]["fp8"] = round(float(own_gemm["bf16"]) * fp8_of_bf16, 4)
    return profile


def _gemm_fit(fit: dict) -> dict:
    return ((fit or {}).get("gemm") or {}).get("max_efficiency") or {}


def _sustained_factor(chip: Chip, fitted: dict) -> float:
    """How far below the best-sustaining chip of its generation this chip's calibrated GEMMs run.

    Chips of one generation share the die and the kernels but not the power budget (B200 1,000 W,
    GB200 1,200 W, GB300 1,400 W): under a power limit the tensor cores run at a lower sustained
    clock, whatever the precision. So where a chip's calibration rows fit its GEMM efficiency in
    one precision, its ratio to the best chip of the generation in that precision also scales the
    precisions it has no calibration rows for; the best chip keeps the priors. 1.0 where no other
    chip of the generation was calibrated in the same precision.
    """
    from windtunnel.specs.hardware import chip_names, load_chip

    chips = fitted.get("chips") or {}
    # A chip without calibration rows of its own runs at its generation's fit (profile_dict), so it stands where
    # that fit stands against the generation's best chip.
    own = _gemm_fit(chips.get(chip.id, {})) or _gemm_fit((fitted.get("generations") or {}).get(chip.generation, {}))
    if not own:
        return 1.0
    generation = {name for name in chip_names() if load_chip(name).generation == chip.generation}
    ratios = []
    for precision, value in own.items():
        peers = [float(_gemm_fit(fit)[precision]) for name, fit in chips.items()
                 if name in generation and name != chip.id and precision in _gemm_fit(fit)]
        if peers:  # a precision no sibling was calibrated in says nothing about this chip's standing
            ratios.append(float(value) / max(peers + [float(value)]))
    return sum(ratios) / len(ratios) if ratios else 1.0


def efficiency_for(chip: Chip, fitted_override: dict | None = None, family: str = "",
                   fp8_recipe: str = "tensor", fp8_of_bf16: float | None = None) -> Efficiency:
    """The efficiency profile of ``chip`` as a stack of calibration ``family`` runs it, with FP8 scaled by
    ``fp8_recipe`` (:meth:`Efficiency.for_fp8_recipe`; 'mx' needs a chip with block-scaled FP8) and, where the
    family has no FP8 fit of its own, FP8 GEMMs at ``fp8_of_bf16`` of its 16-bit fit (:func:`profile_dict`)."""
    if fp8_recipe == "mx" and not chip.block_scaled_fp8:
        raise WindtunnelError(f"Plan field 'fp8_recipe' is 'mx' (MXFP8 block scaling), but chip '{chip.id}' has no "
                              "block-scaled FP8 tensor cores in the catalog (chips.yaml block_scaled_fp8); use "
                              "fp8_recipe=tensor, or a chip that has them (Blackwell).", field="fp8_recipe")
    return _efficiency_for(chip, fitted_override, family, fp8_of_bf16).for_fp8_recipe(fp8_recipe)


def stack_efficiency(chip: Chip, stack: Any, fitted_override: dict | None = None,
                     fp8_recipe: str = "tensor") -> Efficiency:
    """:func:`efficiency_for` as ``stack`` (specs.stack.Stack) runs ``chip``: its calibration family's fits and its
    FP8 GEMM ratio (kernels.fp8_gemm_of_bf16)."""
    return efficiency_for(chip, fitted_override, stack.calibration_family, fp8_recipe, stack.kernels.fp8_gemm_of_bf16)


def _efficiency_for(chip: Chip, fitted_override: dict | None, family: str, fp8_of_bf16: float | None) -> Efficiency:
    p = profile_dict(chip, fitted_override, family, fp8_of_bf16)
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
        attention_fp8_ratio=float(attention["fp8_ratio"]),
        attention_fp8_bwd_skips_window=bool(attention.get("fp8_backward_skips_window", True)),
        memory_bandwidth=float(p["memory"]["bandwidth_efficiency"]),
        unvectorized_bandwidth=float(p["memory"]["unvectorized_factor"]),
        kernel_overhead_s=float(p["kernel_overhead_s"]),
        scale_up=float(comm["scale_up_efficiency"]),
        scale_out=float(comm["scale_out_efficiency"]),
        half_message_bytes=float(comm["half_message_bytes"]),
        tree_bandwidth_factor=float(comm.get("tree_bandwidth_factor", 0.5)),
        optimizer_bytes_per_param=float(p["optimizer"]["bytes_per_param"]),
        host_op_s=float((p.get("host") or {}).get("op_s", 0.0)),
        host_library_call_s=float((p.get("host") or {}).get("library_call_s", 0.0)),
        host_launch_s=float((p.get("host") or {}).get("launch_s", 0.0)),
        host_link=float(p["host_link_efficiency"]),
        host_memory=float(p.get("host_memory_efficiency", 0.75)),
        overlap_comm_units=int(p["overlap_comm_units"]),
        attention_kernels=tuple(sorted((str(name), float(k["fwd_efficiency"]), float(k["bwd_efficiency"]))
                                       for name, k in (p.get("attention_kernels") or {}).items())),
    )
