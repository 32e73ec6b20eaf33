"""`make demo`: a short tour of windtunnel on the built-in catalog (runs in seconds)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from windtunnel.api import simulate_training
from windtunnel.report.trace import trace_json
from windtunnel.specs.hardware import chip_names, cluster_names
from windtunnel.specs.model import model_names
from windtunnel.specs.yamlio import write_atomic


def _plan_table(console: Console, title: str, model: str, hardware: str, devices: int, seq_len: int,
                global_batch: int, plans: list[str]) -> list:
    """Simulate ``plans`` and print them as the search tables do: one line per plan within 80 columns, the keys
    the plans share under the table (report/plan_columns.py)."""
    from windtunnel.report.plan_columns import narrow_plan_table

    results = [simulate_training(model, hardware, devices, seq_len=seq_len, global_batch=global_batch, plan=plan,
                                 keep_trace=True) for plan in plans]
    rows = [{"rank": i + 1, "plan": r.plan, "step_time_s": r.step_time_s, "tokens_per_s": r.tokens_per_s,
             "mfu": r.mfu, "peak_memory_bytes": r.peak_memory_bytes,
             "memory_headroom_bytes": r.memory_capacity_bytes - r.peak_memory_bytes, "breakdown": r.breakdown}
            for i, r in enumerate(results)]
    table, footer = narrow_plan_table(title, rows)
    console.print(table)
    unfit = [str(i + 1) for i, r in enumerate(results) if not r.feasible]
    if unfit:
        console.print(f"does not fit in device memory: plan {', '.join(unfit)} (negative 'free')", style="red")
    for line in footer[:-1]:  # the last footer line repeats the best plan; the tour names it itself
        console.print(line, markup=False, highlight=False)
    return results


def _accuracy(console: Console) -> None:
    """The accuracy over every validation file: the committed report when run from a checkout, else the packaged
    error bands (catalog/bands.yaml, generated from the same rows), so an installed package says it too."""
    from windtunnel.train.uncertainty import load_bands

    report = Path("validation/ACCURACY.md")
    if report.exists():
        for line in report.read_text(encoding="utf-8").splitlines():
            if line.startswith(("- validation rows", "- calibration rows", "- ranking")):
                console.print(line.lstrip("- ").replace("**", ""), markup=False, highlight=False)
        console.print("per stack, chip and dense/MoE: validation/ACCURACY.md (regenerate with `make validate`)")
        return
    bands = load_bands()
    if not bands:
        return
    every = bands["all"]
    low, high = every["band"]["ratio"]
    console.print(f"{every['validation_rows']} validation rows of published runs ({len(every['stacks'])} stacks, "
                  f"{len(every['chips'])} chips): measured / predicted step time median {every['own']['median_ratio']:.3f}, "
                  f"10th-90th percentile {low:.3f}-{high:.3f} (packaged catalog/bands.yaml)")


def main() -> None:
    console = Console()
    console.rule("[bold]windtunnel: a digital wind tunnel for LLM clusters")
    console.print(f"catalog: {len(chip_names())} chips, {len(cluster_names())} clusters, {len(model_names())} models "
                  "(`windtunnel catalog list`)")

    console.rule("DeepSeek-V3 (671B MoE, MLA, 256 experts top-8) on one Ascend CloudMatrix384 supernode")
    results = _plan_table(console, "384 x Ascend 910C, seq 4096, global batch 1152", "deepseek-v3", "ascend-910c", 384,
                          4096, 1152, [
                              "tp=1,pp=12,ep=32,mbs=1,recompute=full,zero=1",
                              "tp=1,pp=12,ep=32,vpp=2,mbs=1,recompute=full,zero=1",
                              "tp=1,pp=12,ep=32,mbs=1,recompute=full,zero=1,schedule=dualpipe",
                              "tp=1,pp=12,ep=32,mbs=1,recompute=selective,zero=1",
                          ])
    feasible = [r for r in results if r.feasible]
    best = min(feasible, key=lambda r: r.step_time_s)
    out = Path("out")
    trace_path = out / "deepseek-v3-cloudmatrix384-step.json"
    write_atomic(trace_path, trace_json(best.trace, title=best.plan))
    console.print(f"best feasible plan: {best.plan}\n  -> {best.tokens_per_s:,.0f} tokens/s on the supernode; "
                  f"step trace in {trace_path} (open in https://ui.perfetto.dev)")

    console.rule("Plan search: the whole deployment space for DeepSeek-V3 on the supernode")
    from windtunnel.report.search_report import search_table
    from windtunnel.search.backends import LocalBackend
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.model import load_model
    from windtunnel.train.search import search_training
    from windtunnel.train.space import SearchSpace

    space = SearchSpace(load_model("deepseek-v3"), load_hardware("ascend-910c", 384), 4096, 1152)
    backend = LocalBackend()
    try:
        document = search_training(space, backend, top=5, refine_count=16,
                                   baseline="tp=1,pp=12,ep=32,mbs=1,recompute=full,zero=1")
    finally:
        backend.close()
    search_table(document, console)

    console.rule("Serving DeepSeek-V3 on the supernode: prefill/decode disaggregated, large expert parallelism")
    from windtunnel.api import failure_aware_goodput, simulate_serving

    served = simulate_serving("deepseek-v3", "ascend-910c", "prefill:ep=32,replicas=2;decode:ep=128,replicas=1",
                              "poisson:rate=8,input=lognormal(2000,0.8),output=lognormal(400,1.0)",
                              slo="ttft=2s,tpot=100ms", seed=1)
    console.print(f"goodput at SLO (TTFT 2 s, TPOT 100 ms): {served.goodput_requests_per_s:.2f} req/s "
                  f"({served.slo_attainment:.0%} of requests meet it); TTFT p50 {served.ttft_s['p50'] * 1e3:.0f} ms, "
                  f"TPOT p50 {served.tpot_s['p50'] * 1e3:.0f} ms on {served.devices} NPUs "
                  "(`windtunnel infer simulate ...` for the full report)")

    console.rule("Faults: tokens per wall-second after failures, checkpoints and restarts")
    rows = failure_aware_goodput("deepseek-v3", "ascend-910c", 384, seq_len=4096, global_batch=1152,
                                 plans=["tp=1,pp=12,ep=32,vpp=2,mbs=1,recompute=full,zero=1"],
                                 faults="catalog:meta-rsc1")
    for row in rows:
        console.print(f"{row.get('plan', '')}: ETTR {row.get('ettr', float('nan')):.1%}, "
                      f"{row.get('goodput_tokens_per_s', float('nan')):,.0f} tokens/s after faults")

    console.rule("Llama-3 405B on 16,384 H100 (the Llama 3 paper's 8K-context setup)")
    _plan_table(console, "16,384 x H100 SXM, seq 8192, global batch 2048", "llama3-405b", "h100-sxm", 16384, 8192, 2048, [
        "tp=8,pp=16,mbs=1,recompute=selective,sp=true,zero=1",
        "tp=8,pp=16,vpp=4,mbs=1,recompute=selective,sp=true,zero=1,tp_overlap=true",
        "tp=8,pp=16,vpp=4,mbs=1,recompute=full,sp=true,zero=1,tp_overlap=true",
    ])

    console.rule("Pangu Ultra 135B (dense) on Atlas 800T A2 (Ascend 910B) nodes")
    _plan_table(console, "1,024 x Ascend 910B, seq 8192, global batch 512", "pangu-ultra-135b", "ascend-910b", 1024, 8192,
                512, [
                    "tp=8,pp=8,vpp=2,mbs=1,recompute=selective,sp=true,zero=1",
                    "tp=8,pp=8,vpp=2,mbs=1,recompute=full,sp=true,zero=1",
                ])

    console.rule("accuracy")
    _accuracy(console)
    console.print("\nnext: `windtunnel train simulate --help`, `windtunnel validate training validation/training_runs.csv`")


if __name__ == "__main__":
    main()
