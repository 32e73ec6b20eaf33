"""The `windtunnel` command line: ``app`` is the root Typer group, ``main`` the entry point.

One module per command group: ``app`` (root, ``train simulate|search``, ``validate``, ``catalog``),
``avail``, ``infer``, ``explain`` (``train explain|sensitivity``, ``compare``), ``job`` (``train job``),
``calibrate``, ``profiling`` (``calibrate collectives|trace``, ``probe``) and ``graph``. The CLI is a thin
layer over :mod:`windtunnel.api` and the pillars; it never holds model physics.
"""

from windtunnel.cli.app import app, main

__all__ = ["app", "main"]
