"""DeepSeek-V3's memory techniques (report arXiv:2412.19437 Sec. 3.2.3, 3.3.2) and DualPipe's activation
accounting (deepseek-ai/DualPipe dualpipe.py DualPipe.step(); README table: parameters 2x, activations PP+1)."""

from __future__ import annotations

import pytest

from windtunnel.api import simulate_training
from windtunnel.insight import training_job
from windtunnel.specs.errors import WindtunnelError
from windtunnel.specs.plan import parse_plan
from windtunnel.train.memory import dualpipe_in_flight, layer_saved_bytes, step_memory
from windtunnel.train.step import _StepBuilder

DSV3 = dict(seq_len=4096, global_batch=15360)
DSV3_PLAN = "tp=1,pp=16,ep=64,precision=fp8,mtp=1,schedule=dualpipe"
# As published: RMSNorm and MLA up-projections recomputed (Sec. 3.2.3), the MoE SwiGLU input cached in FP8
# and its output recomputed (Sec. 3.3.2), BF16 AdamW moments (Sec. 3.3.2), FP32 master weights and gradients.
DSV3_RECIPE = DSV3_PLAN + ",recompute_modules=layernorm+mla_up_proj+moe_act,moments=bf16,act_fp8_store=true"


def _dualpipe_step_peaks(pp: int, micro_batches: int) -> list[tuple[int, int]]:
    """Per rank, the (phase 0, phase 1) micro-batches held at the peak, counted through steps 1-4 of
    DualPipe.step() (phase 0 is the rank's shallow stage; a zero-bubble backward frees at its W)."""
    peaks = []
    for rank in range(pp):
        half_ranks, h = pp // 2, min(rank, pp - 1 - rank)
        # +1: a forward of that phase; -1: a backward (or its W) of that phase.
        moves = [(0, 1)] * ((half_ranks - h - 1) * 2)                     # step 1: nF0
        moves += [(0, 1), (1, 1)] * (h + 1)                              # step 2: nF0F1
        moves += [(1, -1), (1, 1)] * (half_ranks - h - 1)                # step 3: nB1W1F1
        moves += [(0, 1), (1, -1), (1, 1), (0, -1)] * (micro_batches // 2 - pp + h + 1)  # step 4: nF0B1F1B0
        held, best = [0, 0], (0, 0)
        for phase, change in moves:
            held[phase] += change
            best = max(best, (held[0], held[1]), key=sum)
        peaks.append(best)
    return peaks


@pytest.mark.parametrize("pp", [2, 4, 8, 16])
def test_dualpipe_in_flight_matches_the_dualpipe_step(pp):
    micro_batches = 4 * pp
    for rank, (shallow, deep) in enumerate(_dualpipe_step_peaks(pp, micro_batches)):
        ours = [dualpipe_in_flight(pp, rank, chunk, micro_batches) for chunk in (0, 1)]
        # Our chunk 0 is stage `rank`: the shallow stage on the first half of the ranks, the deep one after.
        assert (ours if rank < pp // 2 else ours[::-1]) == [shallow, deep]
        assert sum(ours) == pp + 1


def test_dualpipe_in_flight_is_capped_by_the_micro_batches_of_each_direction():
    assert [dualpipe_in_flight(8, 0, chunk, 8) for chunk in (0, 1)] == [4, 1]
    assert [dualpipe_in_flight(8, 7, chunk, 8) for chunk in (0, 1)] == [1, 4]


def test_dualpipe_activations_weight_each_stage_by_its_micro_batches():
    """Rank 0 holds the embedding stage pp times and the loss/MTP stage once, not pp+1 of their mean."""
    builder = _StepBuilder(training_job("deepseek-v3", "h800", 2048, plan=DSV3_PLAN, **DSV3))
    chunks = builder.chunks()
    first, last = chunks[(0, 0)].activation_bytes, chunks[(0, 1)].activation_bytes
    assert last > 2 * first  # the deep stage (3 MoE layers, MTP module, head) outweighs 3 dense layers
    worst = step_memory(builder, chunks)
    expected = max(sum(c.activation_bytes * dualpipe_in_flight(16, r, k, builder.micro_batches)
                       for (r, k), c in chunks.items() if r == rank) for rank in range(16))
    assert worst.memory.parts["saved_activations"] == pytest.approx(expected)
    assert 16 * first + last < 17 * (first + last) / 2


def test_act_fp8_store_halves_the_swiglu_inputs_and_costs_no_time():
    plan = DSV3_PLAN + ",recompute_modules=layernorm+mla_up_proj+moe_act"
    builders = [_StepBuilder(training_job("deepseek-v3", "h800", 2048, plan=plan + extra, **DSV3))
                for extra in ("", ",act_fp8_store=true")]
    mode = builders[0].recompute_modes(1)[0]
    acts = sum(op.saved_bytes for op in builders[0].forward_graphs["moe"].ops if op.name.endswith(".act"))
    saved = [layer_saved_bytes(b, "moe", mode) for b in builders]
    assert saved[0] - saved[1] == pytest.approx(acts / 2)
    runs = [simulate_training("deepseek-v3", "h800", 2048, plan=plan + extra, **DSV3) for extra in ("", ",act_fp8_store=true")]
    assert runs[1].memory_breakdown["activations"] < runs[0].memory_breakdown["activations"]
    assert runs[1].step_time_s == pytest.approx(runs[0].step_time_s)


def test_deepseek_v3_as_published_fits_in_80_gb_with_its_mtp_module():
    """The published recipe fits on 80 GB H800s with DualPipe and the MTP module; the default selective
    recompute (attention) with fp32 moments and 16-bit SwiGLU inputs does not."""
    recipe = simulate_training("deepseek-v3", "h800", 2048, plan=DSV3_RECIPE, **DSV3)
    assert recipe.feasible and recipe.peak_memory_bytes < 76 * 2**30
    assert not simulate_training("deepseek-v3", "h800", 2048, plan=DSV3_PLAN, **DSV3).feasible


def test_act_fp8_store_round_trips_and_needs_swiglu():
    plan = parse_plan("tp=1,activation_func_fp8_input_store=true")
    assert plan.act_fp8_store and "act_fp8_store=true" in plan.to_string() and "act_fp8_store" in plan.short()
    assert parse_plan(plan.short()).act_fp8_store
    with pytest.raises(WindtunnelError, match="act_fp8_store"):
        simulate_training("gpt3-175b", "h100-sxm", 64, seq_len=2048, global_batch=64, plan="tp=8,pp=8,act_fp8_store=true")


def test_the_search_screen_counts_dualpipe_stages_as_the_engine_does():
    """The vectorised screen weights each DualPipe stage by its micro-batches too (within 2% of the engine)."""
    from windtunnel.search.backends import LocalBackend
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.model import load_model
    from windtunnel.train.search import TrainingProblem
    from windtunnel.train.space import SearchSpace

    choices = {"tp": [1], "pp": [16], "ep": [64], "vpp": [1], "mbs": [1], "recompute": ["selective"], "zero": [1],
               "cp": [1], "sp": [True], "tp_overlap": [False], "schedule": ["dualpipe"], "order": ["tp-cp-dp-pp"]}
    space = SearchSpace(load_model("deepseek-v3"), load_hardware("h800", 2048), 4096, 15360, precision="fp8",
                        choices=choices)
    problem = TrainingProblem(space)
    chunk = problem.chunk(0, 1)
    problem.prepare(chunk, LocalBackend(1))
    _, memory, _ = problem.screen(chunk)
    plan = space.plan_of({key: value[0] for key, value in chunk.items()})
    engine = simulate_training("deepseek-v3", "h800", 2048, plan=plan, **DSV3)
    assert float(memory[0]) == pytest.approx(engine.peak_memory_bytes, rel=0.02)
