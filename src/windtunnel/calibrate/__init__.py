"""Calibration: the shipped calibration fitted on the calibration rows (``shipped``), a user's profile
fitted on their own measurements (``fit``) and the before/after report of a profile (``report``).
Profiles themselves (reading, checking, applying) live in :mod:`windtunnel.profile`, which the cost core
reads."""
