"""Whole-run validation of `windtunnel train job`: predicted device-hours of published pre-training runs vs the
totals their authors state. Regenerate with ``.venv/bin/python validation/job_runs.py`` (writes
validation/JOB_REPORT.md; deterministic).

Each run states its source, the tokens, cluster and plan as published, and every assumption. Two predictions
per run: (a) the full rehearsal (Sim2Train's step, Sim2Availability's faults); (b) the same fault model on the
step rate the authors publish (their TFLOP/s per GPU or GPU-hours per trillion tokens), which separates the
error of the step from the error of the fault model. Published totals include restarts unless said otherwise.
"""

from __future__ import annotations

from pathlib import Path

from windtunnel.job.run import JobInputs, Phase, rehearse_job

RUNS = [
    {
        "id": "J1", "name": "Llama 3.1 405B pre-training",
        "published_device_hours": 30.84e6,
        "published": "Llama 3.1 model card (meta-llama/llama-models, models/llama3_1/MODEL_CARD.md): 405B 'Training "
                     "Time (GPU hours)' 30.84M on H100-80GB (cumulative; includes the job's restarts)",
        "model": "llama3-405b", "hardware": "h100-sxm", "devices": 16384, "faults": "catalog:llama3-54day",
        "policy": "restart-from-checkpoint",
        "phases": [Phase("8K", 8192, 14.8e12, 2048, "tp=8,pp=16,vpp=7,recompute=full,recompute_layers=1"),
                   Phase("128K", 131072, 0.8e12, 128, "tp=8,pp=16,cp=16,vpp=7,recompute=full,recompute_layers=2")],
        # Llama 3 paper Table 4: 400 TFLOP/s per GPU at 16K GPUs and 8K sequences, 380 at 128K (CP16)
        "published_tflops": [400.0, 380.0],
        "assumptions": [
            "Llama 3 paper (arXiv:2407.21783) Sec. 3.4: 15.6T tokens in all; taken as 14.8T at 8K sequences then 0.8T of "
            "long-context pre-training at 128K (Sec. 3.4.2: ~800B tokens); the early 4M/8M-token batches (first 2.87T "
            "tokens, partly on 8,192 GPUs, Table 4) are run at the 16M-token batch on 16,384 GPUs",
            "plan as published in Table 4 (TP8 PP16 DP128; TP8 CP16 PP16 DP8 at 128K); interleaving vpp=7 and "
            "recomputing one layer per chunk are ours (the paper does not state them; selective recompute alone "
            "does not fit in 80 GB in our memory model)",
            "faults: the paper's own 54-day interruption record (catalog:llama3-54day); recovery defaults of "
            "restart-from-checkpoint (detection 150 s, restart 600 s)",
        ],
    },
    {
        "id": "J2", "name": "DeepSeek-V3 pre-training",
        "published_device_hours": 2.664e6,
        "published": "DeepSeek-V3 technical report (arXiv:2412.19437) Table 1: pre-training 2,664K H800 GPU-hours "
                     "(180K GPU-hours per trillion tokens x 14.8T; the report says no rollbacks were needed)",
        "model": "deepseek-v3", "hardware": "h800", "devices": 2048, "faults": "catalog:llama3-54day",
        "policy": "restart-from-checkpoint",
        "phases": [Phase("4K", 4096, 14.8e12, 15360, "tp=1,pp=16,ep=64,precision=fp8,mtp=1")],
        "published_device_hours_per_token": 180e3 / 1e12,
        "assumptions": [
            "report Sec. 3.2 and 4.2: 2,048 H800, PP16, EP64 over 8 nodes, ZeRO-1 data parallelism, no TP, FP8, one "
            "MTP module; sequence 4K; batch 15,360 sequences (its ramp from 3,072 over the first 469B tokens is "
            "ignored); the DualPipe schedule does not fit in 80 GB in our memory model, so 1F1B is used",
            "faults: DeepSeek publishes no failure record; the Llama 3 per-component rates (catalog:llama3-54day) "
            "at 2,048 GPUs are assumed",
            "the published figure is throughput x tokens (180K GPU-hours per trillion tokens), so it likely leaves "
            "restarts out: prediction (b) with faults is expected above it by 1/ETTR",
        ],
    },
    {
        "id": "J3", "name": "Llama 3.1 70B pre-training",
        "published_device_hours": 7.0e6,
        "published": "Llama 3.1 model card: 70B 'Training Time (GPU hours)' 7.0M on H100-80GB",
        "model": "llama3-70b", "hardware": "h100-sxm", "devices": 8192, "faults": "catalog:llama3-54day",
        "policy": "restart-from-checkpoint",
        "phases": [Phase("8K", 8192, 15.0e12, 2048, "tp=8,pp=4,vpp=5")],
        "assumptions": [
            "model card: pre-trained on ~15T tokens; the cluster size, plan and sequence schedule of the 70B run are "
            "not published: 8,192 GPUs, TP8 PP4 vpp=5, 8K sequences, 16M-token batches are assumptions",
        ],
    },
    {
        "id": "J4", "name": "Llama 3.1 8B pre-training",
        "published_device_hours": 1.46e6,
        "published": "Llama 3.1 model card: 8B 'Training Time (GPU hours)' 1.46M on H100-80GB",
        "model": "llama3-8b", "hardware": "h100-sxm", "devices": 2048, "faults": "catalog:llama3-54day",
        "policy": "restart-from-checkpoint",
        "phases": [Phase("8K", 8192, 15.0e12, 2048, "tp=1,pp=1,zero=3")],
        "assumptions": [
            "model card: ~15T tokens; cluster size and plan not published: 2,048 GPUs, FSDP (ZeRO-3), 8K sequences, "
            "16M-token batches are assumptions",
        ],
    },
    {
        "id": "J5", "name": "MPT-7B pre-training",
        "published_device_hours": 440 * 9.5 * 24,
        "published": "mosaicml/mpt-7b model card (Hugging Face), Training Configuration: 440 A100-40GBs for about 9.5 "
                     "days, FSDP sharded data parallelism, LION optimizer; MosaicML blog 'Introducing MPT-7B' (May 2023): "
                     "1T tokens, 9.5 days with zero human intervention, ~$200k -> 440 x 9.5 d x 24 h = 100,320 GPU-hours "
                     "of wall time (restarts included)",
        "model": "validation/models/mpt-7b.yaml", "hardware": "a100-40g", "devices": 440, "faults": "catalog:meta-rsc1",
        "policy": "restart-from-checkpoint", "framework": "llm-foundry",
        "phases": [Phase("2K", 2048, 1.0e12, 1760, "tp=1,pp=1,zero=3")],
        "assumptions": [
            "model shape from the mosaicml/mpt-7b config.json (validation/models/mpt-7b.yaml); sequence 2048; the global "
            "batch is not stated in the sources used: 1,760 sequences (4 per GPU) assumed",
            "stack llm-foundry (MosaicML's own), FSDP full sharding (ZeRO-3); the checkpoint rule assumes Adam's two "
            "moments, LION keeps one (checkpoint overstated by 4 bytes/parameter, immaterial at 7B)",
            "faults: Meta's A100 research cluster RSC-1 rate (catalog:meta-rsc1, 6.5 failures per 1000 node-days) on 55 "
            "nodes of 8; MosaicML's auto-resume taken as the default restart-from-checkpoint recovery",
        ],
    },
]


def _published_rate_hours(run: dict, doc: dict) -> float | None:
    """Device-hours with the authors' step rate and our ETTR per phase (prediction b)."""
    total = 0.0
    for i, p in enumerate(doc["phases"]):
        if "published_tflops" in run:
            flops_per_token = p["mfu"] * run_peak(run) * run["devices"] / p["tokens_per_s"]
            tps = run["published_tflops"][i] * 1e12 * run["devices"] / flops_per_token
        elif "published_device_hours_per_token" in run:
            tps = run["devices"] / (run["published_device_hours_per_token"] * 3600.0)
        else:
            return None
        total += run["devices"] * p["tokens"] / tps / p["ettr"] / 3600.0
    return total


def run_power(run: dict) -> float:
    from windtunnel.specs.hardware import load_hardware

    return load_hardware(run["hardware"], run["devices"]).chip.power_w or 0.0


def run_peak(run: dict) -> float:
    from windtunnel.specs.hardware import load_hardware

    return load_hardware(run["hardware"], run["devices"]).chip.peak("bf16")


def main(out: Path = Path(__file__).with_name("JOB_REPORT.md")) -> None:
    lines = ["# Whole-run validation: `train job` vs published pre-training totals", "",
             "Generated by `validation/job_runs.py` (deterministic). Device-hours = devices x wall time. (a): the full "
             "rehearsal (Sim2Train step x Sim2Availability ETTR). (b): the same ETTR on the step rate the authors publish "
             "(isolates the fault model). Error = predicted / published - 1. Done-when target: within 20%.", "",
             "| id | run | devices | tokens | published device-h | (a) predicted | error (a) | fault-free (a) | ETTR | "
             "(b) published rate + faults | error (b) | days (a) | interruptions |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    details = []
    for run in RUNS:
        inp = JobInputs(model=run["model"], hardware=run["hardware"], devices=run["devices"], faults=run["faults"],
                        policy=run["policy"], framework=run.get("framework", "megatron"), replications=20, seed=0)
        doc = rehearse_job(inp, run["phases"], keep_timeline=False)
        pub = run["published_device_hours"]
        pred = doc["device_hours"]
        free = doc["fault_free_time_s"] * run["devices"] / 3600.0
        b = _published_rate_hours(run, doc)
        lines.append(f"| {run['id']} | {run['name']} | {run['devices']} | {doc['tokens'] / 1e12:.4g}T | {pub / 1e6:.3f}M | "
                     f"{pred / 1e6:.3f}M | {pred / pub - 1:+.1%} | {free / 1e6:.3f}M | {doc['ettr']:.3f} | "
                     + ("n/a | n/a" if b is None else f"{b / 1e6:.3f}M | {b / pub - 1:+.1%}")
                     + f" | {doc['time_to_train_days']:.1f} | {doc['interruptions']:.0f} |")
        energy = ("" if doc["energy_kwh"] is None else
                  f"- energy (a): {doc['energy_kwh'] / 1e6:.2f} GWh of device energy at PUE 1 (the rule in "
                  f"windtunnel.job.costs); the published device-hours at the chip's {run_power(run):g} W board power "
                  f"(the basis model cards use for emissions) give {pub * run_power(run) / 1e9:.2f} GWh")
        details += [f"## {run['id']}: {run['name']}", "", f"- published: {run['published']}", *([energy] if energy else []),
                    *(f"- phase {p['name']}: plan `{p['plan']}`; step {p['step_time_s']:.3g} s, {p['tokens_per_s']:.4g} "
                      f"tokens/s (MFU {p['mfu']:.1%}); ETTR {p['ettr']:.4f}; checkpoint {p['checkpoint']['bytes'] / 1e12:.3g} TB "
                      f"written in {p['checkpoint']['write_s']:.3g} s every {p['checkpoint']['every_s'] / 60:.3g} min"
                      for p in doc["phases"]),
                    *(f"- assumption: {a}" for a in run["assumptions"]), ""]
    lines += ["", "Reading: J1 (Llama 3.1 405B), the one run whose cluster, plan, per-GPU throughput and failure record "
              "are all published, is within the 20% target, and so is J5 (MPT-7B: cluster and duration published, "
              "batch assumed). J2-J4 are not: DeepSeek-V3's error is Sim2Train's step "
              "(about half the throughput DeepSeek reports on H800; with the published rate (b) the fault model alone "
              "lands above the throughput-derived total by 1/ETTR, as expected of a figure that leaves restarts out); "
              "the Llama 3.1 70B and 8B totals imply far lower per-GPU throughput than the 405B run (about 25% and 14% "
              "MFU over 15T tokens) and their clusters and plans are not published, so (b) cannot be formed and the "
              "gap is not attributable to the fault model.", ""]
    out.write_text("\n".join(lines + details) + "\n")
    print("\n".join(lines[:8 + len(RUNS)]))


if __name__ == "__main__":
    main()
