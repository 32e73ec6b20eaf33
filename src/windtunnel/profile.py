"""User calibration profiles: a chip's (and optionally a stack's) fitted efficiency parameters, kept in
the user's own YAML file and overlaid on the catalog at simulation time.

A profile never touches the installed package: the shipped calibration (catalog/calibration.yaml) stays
as it is, and a profile only replaces, for its own chip, the parameters it fitted and identified. The
vocabulary of fittable parameters (:data:`PARAMETERS`) names each parameter's place in the efficiency
profile dict of :mod:`windtunnel.cost.efficiency`, its physical bounds and its unit.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from windtunnel.specs.errors import WindtunnelError, choices_text, did_you_mean
from windtunnel.specs.yamlio import exists, read_yaml, write_atomic

PROFILE_VERSION = 1
DEFAULT_FAMILY = "megatron"  # the calibration family whose fits sit at the top level of the fitted dict


class ParameterSpec(BaseModel):
    """One fittable parameter: where it sits in a chip's efficiency profile dict (``path``), where its
    prior is read when that place is empty (``fallback``), physical ``bounds`` (lo, hi) in ``unit``."""

    model_config = ConfigDict(frozen=True)

    path: tuple[str, ...]
    bounds: tuple[float, float]
    unit: str
    doc: str
    fallback: tuple[str, ...] | None = None


def _spec(path: str, bounds: tuple[float, float], unit: str, doc: str, fallback: str | None = None) -> ParameterSpec:
    return ParameterSpec(path=tuple(path.split("/")), bounds=bounds, unit=unit, doc=doc,
                         fallback=tuple(fallback.split("/")) if fallback else None)


# Physical bounds. GEMMs: no dense GEMM library sustains more than ~85% of the tensor-core peak
# (cuBLAS/CUTLASS published results); below 30% a run would be mis-specified rather than slow.
# Fused attention: 20-85% of the 16-bit peak (FlashAttention-2 on H100 ~35%, FlashAttention-3 ~75%,
# Shah et al. 2024; Ascend npu_fusion_attention lower). Memory-bound kernels: 40-95% of HBM
# bandwidth (STREAM-like microbenchmarks). Collectives: 30-98% of line rate at large messages
# (nccl-tests published bus bandwidths). Host: 1-100 us per eager op (CUDA launch ~4.5 us alone;
# Grace hosts ~37 us per Linear, TransformerEngine issue #2053).
_FRACTION = "fraction of peak"


def _named_kernels() -> list[str]:
    """Named attention kernels: those the catalog stacks run (kernels.attention) and those
    catalog/efficiency.yaml gives efficiencies for (attention_kernels), besides the fused 'flash'."""
    from windtunnel.specs.stack import load_stack, stack_names
    from windtunnel.specs.yamlio import catalog_dir

    names = {load_stack(name).kernels.attention for name in stack_names()}
    priors = read_yaml(catalog_dir("efficiency.yaml")) or {}
    for scope in ("generations", "chips"):
        for fragment in (priors.get(scope) or {}).values():
            names.update((fragment or {}).get("attention_kernels") or {})
    names.update((priors.get("defaults") or {}).get("attention_kernels") or {})
    return sorted(names - {"flash", "unfused"})


PARAMETERS: dict[str, ParameterSpec] = {
    "gemm.bf16": _spec("gemm/max_efficiency/bf16", (0.30, 0.85), _FRACTION, "large bf16 GEMM efficiency"),
    "gemm.fp16": _spec("gemm/max_efficiency/fp16", (0.30, 0.85), _FRACTION, "large fp16 GEMM efficiency"),
    "gemm.fp8": _spec("gemm/max_efficiency/fp8", (0.30, 0.85), _FRACTION, "large fp8 GEMM efficiency (of the fp8 peak)"),
    "attention.flash.fwd": _spec("attention/fwd_efficiency", (0.20, 0.85), _FRACTION,
                                 "fused (flash) attention forward, max over long keys (of the 16-bit peak)"),
    "attention.flash.bwd": _spec("attention/bwd_efficiency", (0.15, 0.85), _FRACTION,
                                 "fused (flash) attention backward, max over long keys (of the 16-bit peak)"),
    "memory.bandwidth_efficiency": _spec("memory/bandwidth_efficiency", (0.40, 0.95), "fraction of HBM bandwidth",
                                         "share of HBM bandwidth memory-bound kernels reach"),
    "memory.unvectorized_factor": _spec("memory/unvectorized_factor", (0.20, 1.00), "fraction of vectorized bandwidth",
                                        "bandwidth of eager unvectorized elementwise kernels vs contiguous ones"),
    "comm.scale_up_efficiency": _spec("comm/scale_up_efficiency", (0.30, 0.95), "fraction of link bandwidth",
                                      "collective bus bandwidth on the scale-up tier (NVLink, HCCS) at large messages"),
    "comm.scale_out_efficiency": _spec("comm/scale_out_efficiency", (0.30, 0.98), "fraction of link bandwidth",
                                       "collective bus bandwidth on the scale-out tier (InfiniBand, RoCE) at large messages"),
    "comm.half_message_bytes": _spec("comm/half_message_bytes", (1.0e4, 1.0e7), "bytes",
                                     "message size at which a collective step reaches half its bandwidth"),
    "comm.tree_bandwidth_factor": _spec("comm/tree_bandwidth_factor", (0.25, 1.0), "fraction of ring bandwidth",
                                        "double-binary-tree algorithm bandwidth relative to the ring's"),
    "host.op_s": _spec("host/op_s", (1.0e-6, 1.0e-4), "s", "host (CPU) time per eager framework op"),
    "host.library_call_s": _spec("host/library_call_s", (0.0, 2.0e-4), "s",
                                 "host time per per-expert GEMM library call of a MoE grouped GEMM"),
    "host_link_efficiency": _spec("host_link_efficiency", (0.30, 0.95), "fraction of host-link bandwidth",
                                  "device-host copy bandwidth share (activation offloading)"),
    "kernel_overhead_s": _spec("kernel_overhead_s", (0.5e-6, 3.0e-5), "s", "launch and tail overhead per kernel"),
}
for _kernel in _named_kernels():
    for _pass, _key, _lo in (("fwd", "fwd_efficiency", 0.20), ("bwd", "bwd_efficiency", 0.15)):
        PARAMETERS[f"attention.{_kernel}.{_pass}"] = _spec(
            f"attention_kernels/{_kernel}/{_key}", (_lo, 0.85), _FRACTION,
            f"attention kernel '{_kernel}' {_pass}ward, max over long keys (of the 16-bit peak)", f"attention/{_key}")


class FittedParameter(BaseModel):
    """One parameter of a profile: its value, the prior it replaces, its bounds, whether the inputs
    identified it (an unidentified one keeps its prior and is not applied), its standard error and the
    command or input that fitted it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    value: float
    prior: float
    bounds: tuple[float, float]
    identified: bool
    stderr: float | None = None
    source: str = ""


class Profile(BaseModel):
    """A calibration profile of one chip (and optionally one stack)."""

    model_config = ConfigDict(extra="forbid")

    windtunnel_profile: int = PROFILE_VERSION
    windtunnel_version: str = Field(default_factory=lambda: package_version())
    chip: str
    stack: str | None = None
    parameters: list[FittedParameter] = Field(default_factory=list)
    inputs: list[dict] = Field(default_factory=list)
    fit: dict = Field(default_factory=dict)

    def identified(self) -> dict[str, float]:
        """The identified parameters by name (what the profile applies)."""
        return {p.name: p.value for p in self.parameters if p.identified}


def package_version() -> str:
    """The installed windtunnel version (written into every profile)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("windtunnel")
    except PackageNotFoundError:  # running from a source tree without an install
        return "0.0.0+source"


def package_dir() -> Path:
    """The installed windtunnel package directory (profiles may not be written inside it)."""
    from importlib import resources

    return Path(str(resources.files("windtunnel"))).resolve()


def _check(profile: Profile, where: str) -> Profile:
    """Check chip, stack, parameter names and bounds; one clear error naming the field otherwise."""
    from windtunnel.specs.hardware import chip_names
    from windtunnel.specs.stack import stack_names

    if profile.windtunnel_profile != PROFILE_VERSION:
        raise WindtunnelError(f"Profile {where}: field 'windtunnel_profile' is {profile.windtunnel_profile}; this "
                              f"windtunnel reads profile format {PROFILE_VERSION}. Refit the profile with this version.",
                              field="windtunnel_profile")
    if profile.chip not in chip_names():
        raise WindtunnelError(f"Profile {where}: field 'chip' is '{profile.chip}', which is not a catalog chip; valid: "
                              f"{choices_text(chip_names())}.", field="chip")
    if profile.stack is not None and profile.stack not in stack_names():
        raise WindtunnelError(f"Profile {where}: field 'stack' is '{profile.stack}', which is not a catalog stack; "
                              f"valid: {choices_text(stack_names())} (or leave it out).", field="stack")
    seen: set[str] = set()
    for p in profile.parameters:
        if p.name not in PARAMETERS:
            raise WindtunnelError(f"Profile {where}: parameter '{p.name}' is not a fittable parameter; valid: "
                                  f"{', '.join(sorted(PARAMETERS))}.", field="parameters")
        if p.name in seen:
            raise WindtunnelError(f"Profile {where}: parameter '{p.name}' is listed twice; keep one entry.",
                                  field="parameters")
        seen.add(p.name)
        lo, hi = PARAMETERS[p.name].bounds
        if not (math.isfinite(p.value) and lo <= p.value <= hi):
            raise WindtunnelError(
                f"Profile {where}: parameter '{p.name}' has value {p.value:g} {PARAMETERS[p.name].unit}, outside its "
                f"physical bounds [{lo:g}, {hi:g}] ({PARAMETERS[p.name].doc}).", field=p.name)
    return profile


def load_profile(path: str | Path) -> Profile:
    """Read and check a profile YAML (safe_load); bad YAML, a wrong format version, an unknown chip,
    stack or parameter name, or a value outside its physical bounds is one clear error."""
    path = Path(path)
    if not exists(path, "file"):
        folder = path.parent if exists(path.parent, "dir") else Path(".")
        near = sorted(p.name for p in folder.glob("*.y*ml"))
        raise WindtunnelError(f"Field 'profile' is '{path}': no such file{did_you_mean(path.name, near)}; give a "
                              "profile YAML written by `windtunnel calibrate ... --out` (e.g. "
                              "profiles/my-cluster.yaml).", field="profile")
    doc = read_yaml(path)
    if not isinstance(doc, dict) or "windtunnel_profile" not in doc:
        raise WindtunnelError(f"Profile '{path}' is not a windtunnel profile: expected a mapping with "
                              "'windtunnel_profile', 'chip' and 'parameters' (written by `windtunnel calibrate ... "
                              "--out`).", field="windtunnel_profile")
    try:
        profile = Profile.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise WindtunnelError(f"Profile '{path}': field '{field}' is invalid ({first['msg']}); see a profile written "
                              "by `windtunnel calibrate ... --out` for the schema.", field=field) from exc
    return _check(profile, f"'{path}'")


def check_writable(path: str | Path) -> None:
    """A profile path inside the installed windtunnel package is refused (one clear error)."""
    target = Path(path).resolve()
    if target == package_dir() or package_dir() in target.parents:
        raise WindtunnelError(f"Refusing to write profile '{path}' inside the installed windtunnel package "
                              f"({package_dir()}): profiles are the user's files and never change the shipped "
                              "calibration. Write it elsewhere, e.g. --out profiles/my-cluster.yaml.", field="out")


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write ``profile`` to ``path`` atomically. Where ``path`` already holds a profile of the same chip,
    merge into it: parameters replaced by name (except that one the new fit did not identify leaves an
    identified one in place), inputs appended, fit statistics updated; a profile of another chip there
    is an error. A path inside the installed windtunnel package is refused."""
    path = Path(path)
    check_writable(path)
    _check(profile, f"for '{path}'")
    if path.exists():
        old = load_profile(path)
        if old.chip != profile.chip:
            raise WindtunnelError(f"Profile '{path}' is of chip '{old.chip}'; refusing to merge a profile of chip "
                                  f"'{profile.chip}' into it. Use another --out path per chip.", field="chip")
        if old.stack and profile.stack and old.stack != profile.stack:
            raise WindtunnelError(f"Profile '{path}' is of stack '{old.stack}'; refusing to merge a profile of stack "
                                  f"'{profile.stack}' into it. Use another --out path per stack.", field="stack")
        # A parameter the new fit did not identify does not replace one an earlier input identified.
        known = {p.name for p in old.parameters if p.identified}
        new = [p for p in profile.parameters if p.identified or p.name not in known]
        fresh = {p.name for p in new}
        kept = [p for p in old.parameters if p.name not in fresh]
        profile = profile.model_copy(update={
            "stack": profile.stack or old.stack,
            "parameters": sorted(kept + new, key=lambda p: p.name),
            "inputs": old.inputs + [i for i in profile.inputs if i not in old.inputs],
            "fit": {**old.fit, **profile.fit}})
    doc = profile.model_dump(mode="json")
    doc["parameters"] = [dict(p, bounds=list(p["bounds"])) for p in doc["parameters"]]
    header = ("# windtunnel calibration profile (a user file; the installed package's calibration is never changed).\n"
              "# Apply with --profile PATH. Only parameters with identified: true are applied.\n")
    write_atomic(path, header + yaml.safe_dump(doc, sort_keys=False))


def _get(tree: dict, path: tuple[str, ...]):
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _set(tree: dict, path: tuple[str, ...], value: float) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _family(stack: str | None) -> str:
    from windtunnel.specs.stack import load_stack

    return load_stack(stack).calibration_family if stack else DEFAULT_FAMILY


def profile_value(profile_dict: dict, name: str) -> float:
    """Parameter ``name`` read from a merged efficiency profile dict (its fallback place if unset)."""
    spec = PARAMETERS[name]
    value = _get(profile_dict, spec.path)
    if value is None and spec.fallback:
        value = _get(profile_dict, spec.fallback)
    if value is None:
        raise WindtunnelError(f"Parameter '{name}' has no value in the catalog profile.", field=name)
    return float(value)


def prior_value(chip_id: str, name: str, stack: str | None = None, *, fitted: dict | None = None) -> float:
    """The value of ``name`` on ``chip_id`` (as ``stack``'s calibration family runs it) from the catalog
    and the shipped calibration (or the fitted dict ``fitted``; {}: the catalog priors alone): what a
    profile's fitted value replaces."""
    from windtunnel.cost.efficiency import profile_dict
    from windtunnel.specs.hardware import chip_names, load_chip

    if chip_id not in chip_names():
        raise WindtunnelError(f"Chip '{chip_id}' is not in the catalog; valid: {choices_text(chip_names())}.",
                              field="chip")
    if name not in PARAMETERS:
        raise WindtunnelError(f"Parameter '{name}' is not fittable; valid: {', '.join(sorted(PARAMETERS))}.",
                              field="parameters")
    from windtunnel.specs.stack import load_stack

    ratio = load_stack(stack).kernels.fp8_gemm_of_bf16 if stack else None
    return profile_value(profile_dict(load_chip(chip_id), fitted_override=fitted, family=_family(stack),
                                      fp8_of_bf16=ratio), name)


def overlay(fitted: dict, chip_id: str, values: dict[str, float], stack: str | None = None) -> dict:
    """A copy of the fitted dict ``fitted`` with ``values`` (parameter name -> value) placed at
    ``chips.<chip_id>``, and also at ``families.<family>.chips.<chip_id>`` for the stack's calibration
    family when ``stack`` is given, else for every family the dict holds (a stack-less profile applies
    to every stack on its chip, over their shipped fits)."""
    out = copy.deepcopy(fitted or {})
    places = [out.setdefault("chips", {}).setdefault(chip_id, {})]
    families = out.setdefault("families", {})
    names = [_family(stack)] if stack else sorted(families)
    for family in names:
        if family != DEFAULT_FAMILY:
            places.append(families.setdefault(family, {}).setdefault("chips", {}).setdefault(chip_id, {}))
    for name, value in sorted(values.items()):
        for place in places:
            _set(place, PARAMETERS[name].path, float(value))
    if not families:
        del out["families"]
    return out


def shipped_fitted() -> dict:
    """The shipped calibration's fitted dict (catalog/calibration.yaml, key ``fitted``)."""
    from windtunnel.specs.yamlio import catalog_dir

    return (read_yaml(catalog_dir("calibration.yaml")) or {}).get("fitted") or {}


def fitted_override(profile: Profile | None) -> dict | None:
    """The shipped fitted dict with the profile's identified parameters overlaid at ``chips.<chip>`` (and
    at the stack's calibration family): what ``TrainingJob.fitted_override`` takes. None without a
    profile (the job then reads the shipped calibration itself)."""
    if profile is None:
        return None
    return overlay(shipped_fitted(), profile.chip, profile.identified(), profile.stack)


def check_applies(profile: Profile, chip_id: str, stack: str | None = None, where: str = "--profile") -> None:
    """A profile applies only to its own chip (and stack, when it names one); anything else is an error."""
    if chip_id != profile.chip:
        raise WindtunnelError(f"{where}: the profile is of chip '{profile.chip}', but the job runs on '{chip_id}'. A "
                              "profile only calibrates its own chip; fit one for this chip or drop --profile.",
                              field="profile")
    if stack is not None and profile.stack is not None and _family(stack) != _family(profile.stack):
        raise WindtunnelError(f"{where}: the profile was fitted on stack '{profile.stack}', but the job runs stack "
                              f"'{stack}' (another calibration family). Fit a profile for this stack or drop "
                              "--profile.", field="profile")


def profile_assumption(profile: Profile, path: str | Path | None = None) -> str:
    """One line for a result's assumptions: which profile was applied and what it set."""
    applied = ", ".join(f"{name} {value:.4g}" for name, value in sorted(profile.identified().items())) or "nothing"
    where = f" '{path}'" if path is not None else ""
    stack = f", stack {profile.stack}" if profile.stack else ""
    return f"profile{where} (chip {profile.chip}{stack}) applied: {applied}"


def apply_profile(profile: str | Path | Profile | None, chip_id: str,
                  stack: str | None = None) -> tuple[dict | None, tuple[str, ...]]:
    """(fitted_override, assumption lines) of a profile (a path or a Profile) for a job on ``chip_id``
    run by ``stack``; (None, ()) without one. A profile of another chip or stack family is an error."""
    if profile is None:
        return None, ()
    path = None
    if not isinstance(profile, Profile):
        path, profile = profile, load_profile(profile)
    check_applies(profile, chip_id, stack)
    return fitted_override(profile), (profile_assumption(profile, path),)
