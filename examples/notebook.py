# %% [markdown]
# # windtunnel from Python, cell by cell
#
# A notebook-style tour of the Python API (open in VS Code / Jupyter as cells, or run it:
# `python examples/notebook.py`). The same questions as the scenario files in this folder: train a model,
# rate plans by goodput after faults, serve it. Units: seconds, tokens, bytes unless a name says otherwise.

# %%
from windtunnel.api import failure_aware_goodput, search_serving, simulate_serving, simulate_training
from windtunnel.avail.markov import solve_markov
from windtunnel.avail.scenario import make_scenario

MODEL, CHIP = "llama3-8b", "h100-sxm"


def get(result, key):
    """A field of a result, whether the API returns it as a mapping or as a typed result."""
    return result[key] if isinstance(result, dict) else getattr(result, key)

# %% [markdown]
# ## 1. One training step (Sim2Train)

# %%
step = simulate_training(MODEL, CHIP, 64, seq_len=8192, global_batch=512, plan="tp=1,pp=1,recompute=selective,zero=2")
print(f"plan {step.plan}: step {step.step_time_s:.3f} s, {step.tokens_per_s:,.0f} tokens/s, MFU {step.mfu:.1%}, "
      f"peak memory {step.peak_memory_bytes / 2**30:.1f} GiB")
print("breakdown (s):", {k: round(v, 4) for k, v in step.breakdown.items()})

# %% [markdown]
# ## 2. Plans rated by goodput after faults (Sim2Train x Sim2Availability)

# %%
rows = failure_aware_goodput(MODEL, CHIP, 128, seq_len=8192, global_batch=512,
                             plans=["tp=1,pp=1,zero=2", "tp=2,pp=1,zero=1"], faults="catalog:meta-rsc1")
for row in get(rows, "rows") if not isinstance(rows, list) else rows:
    print(f"{get(row, 'plan'):>20}: {get(row, 'tokens_per_s'):,.0f} tokens/s, ETTR {get(row, 'ettr'):.3f}, "
          f"goodput {get(row, 'goodput_tokens_per_s'):,.0f} tokens/s")

# %% [markdown]
# ## 3. Availability of a big job (Sim2Availability, Markov model)

# %%
scenario = make_scenario(16384, "catalog:llama3-54day", "restart-from-checkpoint,checkpoint-every=30min,"
                         "checkpoint-cost=60s", step_time_s=12.0, horizon_s=54 * 86400.0, hardware=CHIP)
markov = solve_markov(scenario).to_json_dict(scenario)
print(f"16k GPUs: availability {markov['availability']:.3%}, ETTR {markov['ettr']:.3%}, "
      f"{markov['interruptions_per_day']:.1f} interruptions/day; warnings: {scenario.warnings() or 'none'}")

# %% [markdown]
# ## 4. Serving (Sim2Infer): one deployment, then the fewest devices that meet the SLO

# %%
TRAFFIC = "poisson:rate=8,input=1000,output=200,requests=400"
served = simulate_serving(MODEL, CHIP, "mixed:tp=1,replicas=2", TRAFFIC, slo="ttft=2s,tpot=100ms").to_json_dict()
print(f"TTFT p90 {served['ttft_s']['p90'] * 1e3:.0f} ms, TPOT p90 {served['tpot_s']['p90'] * 1e3:.1f} ms, "
      f"SLO attainment {served['goodput']['slo_attainment']:.1%}")
found = search_serving(MODEL, CHIP, 8, TRAFFIC, slo="ttft=2s,tpot=100ms", top=3, requests=200)
for row in get(found, "deployments"):
    print(f"{row['deployment']:>40}: {row['devices']} devices, attainment {row['attainment']:.1%}")
