"""Typed input specifications (hardware, model, plan) and their loaders."""
