"""Measurements of a user's own cluster turned into profile parameters.

Parsers for collective benchmarks (nccl-tests, hccl-tests) and PyTorch profiler (Kineto) traces, the fits
that map them onto the efficiency model's parameters (:mod:`windtunnel.cost.efficiency`), and an optional
microbenchmark probe (the ``[torch]`` extra). Parsing and fitting are pure: files in, numbers out.
"""
