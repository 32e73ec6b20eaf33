"""Scoring predictions on published measurements, for every pillar that has them.

``rows`` reads the CSVs and summarises errors (shared by both validators); ``training`` predicts the
training rows (``windtunnel validate training|all``), ``fidelity`` and ``bands`` write the cross-file
accuracy report and the uncertainty bands; ``inference`` and ``inference_report`` do the same for the
serving rows (``windtunnel validate inference``). Validation combines pillars, so it sits above them.
"""
