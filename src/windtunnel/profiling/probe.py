"""Microbenchmarks on the local devices (the optional ``[torch]`` extra): GEMMs by shape and dtype, flash
attention (PyTorch SDPA) by sequence length, device memory copies, and NCCL collectives when several
devices are visible. Produces a probe record (:mod:`windtunnel.profiling.fit_probe` fits it).

Timing: CUDA events around ``iters`` back-to-back calls after ``warmup`` calls, seconds per call. FP8
GEMMs use ``torch._scaled_mm`` (per-tensor scales) where the device has FP8 tensor cores (compute
capability >= 8.9). Collectives run in one process per device (``torch.multiprocessing.spawn``, NCCL
backend, a TCP rendezvous on 127.0.0.1); sizes count the whole buffer as nccl-tests does (all-gather: the
gathered output, reduce-scatter: the input).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path

from windtunnel.profiling.fit_probe import RECORD_VERSION
from windtunnel.specs.errors import WindtunnelError, choices_text
from windtunnel.specs.hardware import chip_names

# torch.cuda.get_device_name() -> catalog chip id: (all substrings that must appear, chip id), first match wins.
# Names as the CUDA driver reports them (e.g. "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200").
DEVICE_NAMES = (
    (("GB300",), "gb300"), (("GB200",), "gb200"), (("B300",), "b300"), (("B200",), "b200"), (("H200",), "h200"), (("H800",), "h800"),
    (("H100", "HBM3"), "h100-sxm"), (("H100", "SXM"), "h100-sxm"), (("A100", "80GB"), "a100-80g"),
    (("A100", "40GB"), "a100-40g"), (("910B",), "ascend-910b"), (("910C",), "ascend-910c"),
)
INSTALL = "pip install 'windtunnel[torch]'"


def detect_chip(device_name: str) -> str:
    """The catalog chip id of a device name; an unknown device is a clear error."""
    for needles, chip in DEVICE_NAMES:
        if all(needle.lower() in device_name.lower() for needle in needles):
            return chip
    raise WindtunnelError(f"Device '{device_name}' is not a catalog chip (known: {choices_text(chip_names())}); pass "
                          "--hardware with the closest catalog chip id, or add the chip to the catalog.",
                          field="hardware")


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise WindtunnelError(f"`windtunnel probe` measures local devices with PyTorch, which is not installed: "
                              f"{INSTALL} (or fit a saved record with --from-record).") from exc
    if not torch.cuda.is_available():
        raise WindtunnelError("`windtunnel probe` found no CUDA device (torch.cuda.is_available() is False); run it "
                              "on a machine with the accelerators to profile, or fit a saved record with "
                              "--from-record.")
    return torch


def _timeit(torch, fn, warmup: int, iters: int) -> float:
    """Seconds per call of ``fn`` on the current CUDA stream."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def _gemms(torch, quick: bool, fp8: bool, iters: int) -> list[dict]:
    sizes = (2048, 4096, 8192) if quick else (1024, 2048, 4096, 8192, 16384)
    shapes = [(s, s, s) for s in sizes] + ([] if quick else [(16384, 4096, 14336), (16384, 14336, 4096)])
    rows = []
    for m, n, k in shapes:
        for dtype, torch_dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            a = torch.randn(m, k, device="cuda", dtype=torch_dtype)
            b = torch.randn(k, n, device="cuda", dtype=torch_dtype)
            rows.append({"dtype": dtype, "m": m, "n": n, "k": k,
                         "seconds": _timeit(torch, lambda a=a, b=b: torch.matmul(a, b), 3, iters)})
        if fp8:
            try:
                a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()  # column-major operand
                one = torch.ones((), device="cuda")

                def mm(a=a, b=b, one=one):
                    out = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                    return out[0] if isinstance(out, tuple) else out  # torch < 2.4 returned (out, amax)

                rows.append({"dtype": "fp8", "m": m, "n": n, "k": k, "seconds": _timeit(torch, mm, 3, iters)})
            except (RuntimeError, TypeError, AttributeError):
                fp8 = False  # this torch build has no usable FP8 GEMM; bf16/fp16 still measured
        torch.cuda.empty_cache()
    return rows


def _attention(torch, quick: bool, iters: int) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    lengths = (1024, 4096) if quick else (512, 1024, 2048, 4096, 8192)
    rows = []
    backends = [("flash", SDPBackend.FLASH_ATTENTION)]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):  # cuDNN's fused attention backend, in newer torch builds
        backends.append(("cudnn", SDPBackend.CUDNN_ATTENTION))
    for backend, kernel in backends:
        for seq_len in lengths:
            batch, heads, head_dim = max(1, 16384 // seq_len), 16, 128
            q, k, v = (torch.randn(batch, heads, seq_len, head_dim, device="cuda", dtype=torch.bfloat16,
                                   requires_grad=True) for _ in range(3))
            try:
                with sdpa_kernel([kernel]):
                    out = sdpa(q, k, v)
                    grad = torch.randn_like(out)
                    fwd = _timeit(torch, lambda q=q, k=k, v=v: sdpa(q, k, v), 3, iters)
                    both = _timeit(torch, lambda q=q, k=k, v=v, g=grad: torch.autograd.grad(sdpa(q, k, v), (q, k, v), g),
                                   3, iters)
            except RuntimeError:
                break  # backend not available on this device/build
            rows.append({"backend": backend, "batch": batch, "heads": heads, "seq_len": seq_len,
                         "head_dim": head_dim, "fwd_s": fwd, "bwd_s": max(both - fwd, 1e-9)})
    return rows


def _memory(torch, quick: bool, iters: int) -> list[dict]:
    rows = []
    for size in ((1 << 26, 1 << 30) if quick else (1 << 24, 1 << 26, 1 << 28, 1 << 30, 1 << 31)):
        src = torch.empty(size, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        rows.append({"bytes": size, "seconds": _timeit(torch, lambda s=src, d=dst: d.copy_(s), 3, iters)})
        del src, dst
    torch.cuda.empty_cache()
    return rows


def _collective_worker(rank: int, world: int, port: int, sizes: list[int], iters: int, path: str) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    out = []
    for collective in ("all_reduce", "all_gather", "reduce_scatter"):
        rows = []
        for size in sizes:
            elements = max(world, size // 2 // world * world)
            full = torch.ones(elements, dtype=torch.bfloat16, device="cuda")
            part = torch.ones(elements // world, dtype=torch.bfloat16, device="cuda")
            call = {"all_reduce": lambda f=full: dist.all_reduce(f),
                    "all_gather": lambda f=full, p=part: dist.all_gather_into_tensor(f, p),
                    "reduce_scatter": lambda f=full, p=part: dist.reduce_scatter_tensor(p, f)}[collective]
            dist.barrier()
            rows.append({"size_bytes": elements * 2, "time_s": _timeit(torch, call, 5, iters)})
        out.append({"collective": collective, "ranks": world, "hosts": 1, "rows": rows})
    if rank == 0:
        Path(path).write_text(json.dumps(out), encoding="utf-8")
    dist.destroy_process_group()


def _collectives(torch, quick: bool, iters: int) -> list[dict]:
    world = torch.cuda.device_count()
    if world < 2:
        return []
    sizes = [1 << k for k in range(16, 31, 2 if quick else 1)]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        torch.multiprocessing.spawn(_collective_worker, args=(world, port, sizes, iters, path), nprocs=world)
        return json.loads(Path(path).read_text(encoding="utf-8"))
    finally:
        os.unlink(path)


def run_probe(quick: bool = False, chip: str | None = None) -> dict:
    """Measure the local devices; returns a probe record (JSON-able)."""
    torch = _torch()
    name = torch.cuda.get_device_name(0)
    chip = chip or detect_chip(name)
    iters = 5 if quick else 20
    major, minor = torch.cuda.get_device_capability(0)
    from windtunnel.specs.hardware import load_chip

    fp8 = (major, minor) >= (8, 9) and "fp8" in load_chip(chip).peak_flops
    return {"windtunnel_probe": RECORD_VERSION, "device": name, "chip": chip, "torch": torch.__version__,
            "cuda": torch.version.cuda, "devices": torch.cuda.device_count(), "quick": quick,
            "gemm": _gemms(torch, quick, fp8, iters), "attention": _attention(torch, quick, iters),
            "memory": _memory(torch, quick, iters), "collectives": _collectives(torch, quick, iters)}
