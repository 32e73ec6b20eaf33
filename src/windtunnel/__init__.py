"""windtunnel: a digital wind tunnel for large-model training and inference clusters.

The public Python API lives in :mod:`windtunnel.api`; the most used entry points are re-exported here,
imported on first use so that ``import windtunnel`` (and the CLI's start-up) stays cheap.
"""

from __future__ import annotations

from typing import Any

from windtunnel.specs.errors import WindtunnelError

__all__ = ["WindtunnelError", "capture", "failure_aware_goodput", "load_hardware", "load_model", "parse_plan",
           "search_serving", "search_training", "simulate_availability", "simulate_serving", "simulate_training"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The API's entry points, imported from windtunnel.api when first asked for."""
    if name in __all__:
        from windtunnel import api

        return getattr(api, name)
    raise AttributeError(f"module 'windtunnel' has no attribute {name!r}")
