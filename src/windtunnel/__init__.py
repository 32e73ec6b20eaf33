"""windtunnel: a digital wind tunnel for large-model training and inference clusters.

The public Python API lives in :mod:`windtunnel.api`; the most used entry points are re-exported here.
"""

from windtunnel.api import (
    failure_aware_goodput,
    load_hardware,
    load_model,
    parse_plan,
    simulate_serving,
    simulate_training,
)
from windtunnel.specs.errors import WindtunnelError

__all__ = ["WindtunnelError", "failure_aware_goodput", "load_hardware", "load_model", "parse_plan", "simulate_serving",
           "simulate_training"]
__version__ = "0.1.0"
