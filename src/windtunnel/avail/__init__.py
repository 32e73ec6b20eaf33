"""Sim2Availability: faults, checkpoints and recovery; availability, ETTR and time lost by cause.

Two engines over one set of mechanics (``scenario.Mechanics``): an exact continuous-time Markov chain
(``markov.solve_markov``) and a discrete-time-step Monte Carlo vectorised over replications
(``sim.simulate``; ``stepref`` is the literal step loop it is checked against). Fault profiles with
sources live in ``catalog/faults``. ``target`` answers what reaches an availability target from a
scenario; ``failslow`` models evicting slow components as a policy choice. This package never imports
another pillar: it takes a step time as a number; ``windtunnel.api.failure_aware_goodput``,
``windtunnel.job.run`` (``train job``) and ``windtunnel.serve_avail`` combine it with Sim2Train and Sim2Infer.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each name's module, imported on first use (the Markov chain needs scipy; a CLI start-up need not).
_HOME = {
    "FaultProfile": "faults", "load_faults": "faults", "profile_names": "faults", "daly_interval_s": "formulas",
    "mttf_s": "formulas", "young_interval_s": "formulas", "MarkovResult": "markov", "solve_markov": "markov",
    "RecoveryPolicy": "policy", "parse_policy": "policy", "Scenario": "scenario", "make_scenario": "scenario",
    "serving_availability": "serving", "SimResult": "sim", "simulate": "sim",
}

__all__ = [
    "FaultProfile", "MarkovResult", "RecoveryPolicy", "Scenario", "SimResult", "daly_interval_s", "load_faults",
    "make_scenario", "mttf_s", "parse_policy", "profile_names", "serving_availability", "simulate", "solve_markov",
    "young_interval_s",
]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"windtunnel.avail.{_HOME[name]}"), name)
    raise AttributeError(f"module 'windtunnel.avail' has no attribute {name!r}")
