"""Sim2Train: plan application, memory model, pipeline schedules, step simulation."""
