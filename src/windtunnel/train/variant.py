"""A training job under hardware what-ifs: the cluster changed, and the host's issue cost scaled.

The chip and link changes are the cluster's (:func:`windtunnel.specs.whatif.apply_to_cluster`); the
host's seconds per framework op and per library call live in the efficiency profile, so a
``host_overhead`` change becomes a calibration overlay on the job's chip (the last layer the
profile merge applies), whatever profile the job already runs with.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from windtunnel.cost.efficiency import profile_dict
from windtunnel.specs.hardware import Cluster
from windtunnel.specs.stack import load_stack
from windtunnel.specs.whatif import WhatIf, apply_to_cluster, host_scale, parse_what_if
from windtunnel.specs.yamlio import catalog_dir, read_yaml
from windtunnel.train.step import TrainingJob


def _host_overlay(cluster: Cluster, fitted_override: dict | None, family: str, factor: float) -> dict:
    """The fitted dict with the chip's host seconds multiplied by ``factor`` (at the chip, and at the stack's
    calibration family, the last layer the profile merge applies)."""
    chip = cluster.chip
    host = dict(profile_dict(chip, fitted_override, family).get("host") or {})
    scaled = {name: float(host.get(name, 0.0)) * factor for name in ("op_s", "library_call_s", "launch_s")}
    shipped = fitted_override
    if shipped is None:  # the shipped calibration, which a job reads itself when it has no profile
        shipped = (read_yaml(catalog_dir("calibration.yaml")) or {}).get("fitted") or {}
    fitted = copy.deepcopy(shipped)
    fitted.setdefault("chips", {}).setdefault(chip.id, {})["host"] = dict(scaled)
    if family:
        family_fit = fitted.setdefault("families", {}).setdefault(family, {})
        family_fit.setdefault("chips", {}).setdefault(chip.id, {})["host"] = dict(scaled)
    return fitted


def hardware_variant(cluster: Cluster, fitted_override: dict | None, framework: str,
                     what_if: WhatIf | str | list[str] | None) -> tuple[Cluster, dict | None, WhatIf]:
    """(cluster, fitted dict) under the what-ifs, for a job run by stack ``framework``; and the parsed what-ifs."""
    what_if = parse_what_if(what_if)
    if not what_if:
        return cluster, fitted_override, what_if
    changed = apply_to_cluster(cluster, what_if)
    fitted = fitted_override
    if what_if.get("host_overhead") is not None:
        family = load_stack(framework).calibration_family
        current = float((profile_dict(cluster.chip, fitted_override, family).get("host") or {}).get("op_s", 0.0))
        fitted = _host_overlay(cluster, fitted_override, family, host_scale(what_if, current))
    return changed, fitted, what_if


def job_variant(job: TrainingJob, what_if: WhatIf | str | list[str] | None) -> TrainingJob:
    """``job`` on the what-if hardware; its assumptions name the changes."""
    cluster, fitted, what_if = hardware_variant(job.cluster, job.fitted_override, job.framework, what_if)
    if not what_if:
        return job
    notes = (*job.extra_assumptions, f"what-if: {what_if.label}")
    return replace(job, cluster=cluster, fitted_override=fitted, extra_assumptions=notes)
