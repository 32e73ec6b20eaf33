"""The small discrete-event core shared by the pillars."""

from windtunnel.engine.core import Engine, Timeline

__all__ = ["Engine", "Timeline"]
