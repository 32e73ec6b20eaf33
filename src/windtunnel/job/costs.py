"""What a training plan costs beyond its step: checkpoint size and write time, and energy.

Checkpoint (per phase, from the plan): the full training state is the model's parameters times
(2 bytes of bf16 weights + 4 bytes of fp32 master weights + 2 Adam moments of 4 bytes, or 2 with
``moments=bf16``). Who writes it depends on the ZeRO stage: with ZeRO >= 1 (distributed optimizer) every
rank holds a distinct shard and writes it (Megatron's distributed checkpoint, fully parallel save), or with
hybrid sharding (dp_shard) one of the dp/dp_shard ranks holding each shard (the others are copies); with
ZeRO 0 the state is replicated over data parallelism and one replica (``devices / dp`` ranks) writes. The
write takes the longer of (total bytes / storage bandwidth) and (per-rank shard / device-to-host link):
the shared file system and each device's copy out. An asynchronous checkpoint stalls training only for
the device-to-host copy of the shard; the write is durable after the full write time.

Energy (the stated utilisation-to-power rule): a device draws ``P_idle + (P_max - P_idle) x u`` while
the job runs, with ``P_max`` the chip's board power from the catalog (its source there), ``P_idle`` a
fraction of it (a parameter, default 15%, an assumption) and ``u`` the fraction of the step the device
computes (compute, recomputation and optimizer time over the step time, from Sim2Train's breakdown: bubbles
and exposed communication count as idle). While the job is down (detection, waiting for repair, restart)
or stalled on a checkpoint every device draws ``P_idle``. Facility energy = IT energy x PUE. Hosts, network
and storage are not counted separately (PUE and the price per device-hour are the place for them).
"""

from __future__ import annotations

from dataclasses import dataclass

from windtunnel.specs.errors import WindtunnelError

DEFAULT_IDLE_FRACTION = 0.15
IDLE_REASON = ("idle device power: 15% of board power when not given (assumption; idle H100-class boards draw "
               "roughly 60-100 W of 700 W)")


@dataclass(frozen=True)
class CheckpointCost:
    """A plan's checkpoint: bytes, writers, write time (s) and the stall of an asynchronous write (s)."""

    total_bytes: float
    writer_ranks: int
    shard_bytes: float
    write_s: float
    async_stall_s: float
    rule: str


def checkpoint_cost(params: int, *, devices: int, dp: int, zero: int, moments: str,
                    storage_bandwidth_bytes_per_s: float, host_link_bytes_per_s: float | None,
                    replicas: int = 1) -> CheckpointCost:
    """Checkpoint size (bytes) and write time (s) of a plan (see the module docstring for the rule);
    ``replicas``: HSDP copies of each shard (Plan.dp_replicas), of which one writes."""
    if not storage_bandwidth_bytes_per_s > 0:
        raise WindtunnelError(f"Field 'storage-bandwidth' must be > 0 bytes/s, got {storage_bandwidth_bytes_per_s}.",
                              field="storage-bandwidth")
    moment_bytes = 2.0 if moments == "bf16" else 4.0
    per_param = 2.0 + 4.0 + 2.0 * moment_bytes
    total = float(params) * per_param
    writers = max(1, devices // max(replicas, 1)) if zero >= 1 else max(1, devices // max(dp, 1))
    shard = total / writers
    link = host_link_bytes_per_s or storage_bandwidth_bytes_per_s
    write_s = max(total / storage_bandwidth_bytes_per_s, shard / link)
    stall = shard / link
    rule = (f"checkpoint {per_param:g} bytes/parameter (bf16 weights 2 + fp32 master 4 + 2 Adam moments "
            f"x {moment_bytes:g}) = {total / 1e12:.3g} TB, written by {writers} ranks "
            f"({('ZeRO >= 1: every rank its shard' if replicas <= 1 else f'ZeRO >= 1 over HSDP groups: one of {replicas} copies of each shard') if zero >= 1 else 'ZeRO 0: one data-parallel replica'}); "
            f"write {write_s:.3g} s = max(total / storage {storage_bandwidth_bytes_per_s / 1e12:.3g} TB/s, "
            f"shard / device-to-host {link / 1e9:.3g} GB/s)")
    return CheckpointCost(total, writers, shard, write_s, stall, rule)


def busy_fraction(breakdown: dict[str, float], step_time_s: float) -> float:
    """Fraction of a step the device computes: (compute + recompute + optimizer) / step time."""
    busy = sum(breakdown.get(k, 0.0) for k in ("compute", "recompute", "optimizer"))
    return min(1.0, max(0.0, busy / step_time_s)) if step_time_s > 0 else 0.0


def running_power_w(max_power_w: float, idle_fraction: float, utilisation: float) -> float:
    """Device power (W) while running: idle + (max - idle) x utilisation."""
    idle = idle_fraction * max_power_w
    return idle + (max_power_w - idle) * utilisation


def phase_energy_kwh(*, devices: int, wall_s: float, lost_s_by_cause: dict[str, float], max_power_w: float,
                     idle_fraction: float, utilisation: float, pue: float) -> dict:
    """Facility energy (kWh) of a phase: running time at the running power, down and checkpoint time at idle."""
    idle_w = idle_fraction * max_power_w
    run_w = running_power_w(max_power_w, idle_fraction, utilisation)
    idle_s = sum(lost_s_by_cause.get(k, 0.0) for k in ("detection", "waiting_for_repair", "restart", "checkpoint"))
    idle_s = min(idle_s, wall_s)
    it_j = devices * (run_w * (wall_s - idle_s) + idle_w * idle_s)
    return {"energy_kwh": it_j * pue / 3.6e6, "it_energy_kwh": it_j / 3.6e6, "running_power_w": run_w,
            "idle_power_w": idle_w, "utilisation": utilisation}
