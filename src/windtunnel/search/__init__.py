"""Generic search runner: enumerate, prune, screen, refine; local-process and Ray backends."""
