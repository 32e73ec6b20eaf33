"""The whole training job (``train job``): time to train, device-hours, energy and cost after faults.

``run`` rehearses the phases of a job with Sim2Train step times under Sim2Availability's fault model;
``costs`` holds checkpoint and restart costs, ``units`` token counts, ``search`` ranks plans by goodput
with faults, ``report`` renders the text summary.
Imports nothing itself, so that ``windtunnel.job.units`` stays cheap for the CLI.
"""
