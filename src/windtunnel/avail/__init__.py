"""Sim2Availability: faults, checkpoints and recovery; availability, ETTR and time lost by cause.

Two engines over one set of mechanics (``scenario.Mechanics``): an exact continuous-time Markov chain
(``markov.solve_markov``) and a discrete-time-step Monte Carlo vectorised over replications
(``sim.simulate``; ``stepref`` is the literal step loop it is checked against). Fault profiles with
sources live in ``catalog/faults``. This package never imports another pillar: it takes a step time as
a number; ``windtunnel.api.failure_aware_goodput`` combines it with Sim2Train.
"""

from windtunnel.avail.faults import FaultProfile, load_faults, profile_names
from windtunnel.avail.formulas import daly_interval_s, mttf_s, young_interval_s
from windtunnel.avail.markov import MarkovResult, solve_markov
from windtunnel.avail.policy import RecoveryPolicy, parse_policy
from windtunnel.avail.scenario import Scenario, make_scenario
from windtunnel.avail.serving import serving_availability
from windtunnel.avail.sim import SimResult, simulate

__all__ = [
    "FaultProfile", "MarkovResult", "RecoveryPolicy", "Scenario", "SimResult", "daly_interval_s", "load_faults",
    "make_scenario", "mttf_s", "parse_policy", "profile_names", "serving_availability", "simulate", "solve_markov",
    "young_interval_s",
]
