"""The `windtunnel` command: one subcommand group per pillar, a thin layer over windtunnel.api."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from windtunnel.cli.avail import avail_app
from windtunnel.cli.calibrate import calibrate_training_cmd
from windtunnel.cli.explain import register as register_explain
from windtunnel.cli.graph import BATCH_SHAPE_HELP
from windtunnel.cli.graph import register as register_graph
from windtunnel.cli.infer import infer_app, validate_inference_cmd
from windtunnel.cli.job import register as register_job
from windtunnel.cli.profiling import register as register_profiling
from windtunnel.cli.root import register as register_root
from windtunnel.cli.run import register as register_run
from windtunnel.specs.errors import WindtunnelError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="windtunnel: rehearse LLM training and serving on a simulated cluster.")
train_app = typer.Typer(no_args_is_help=True, help="Sim2Train: training step time, MFU, memory.")
validate_app = typer.Typer(no_args_is_help=True, help="Score predictions on published measurements.")
calibrate_app = typer.Typer(no_args_is_help=True, help="Fit a calibration profile of your cluster (written to --out).")
catalog_app = typer.Typer(no_args_is_help=True, help="List the built-in catalog.")
app.add_typer(train_app, name="train")
app.add_typer(validate_app, name="validate")
app.add_typer(calibrate_app, name="calibrate")
app.add_typer(catalog_app, name="catalog")
app.add_typer(avail_app, name="avail")
app.add_typer(infer_app, name="infer")
validate_app.command("inference")(validate_inference_cmd)
calibrate_app.command("training")(calibrate_training_cmd)
register_explain(train_app, app)  # train explain, train sensitivity, compare train
register_job(train_app)  # train job
register_profiling(calibrate_app, app)  # calibrate collectives, calibrate trace, probe
register_graph(app)  # graph show
register_root(app)  # --version; a single-valued option given twice is an error, on every verb
register_run(app)  # run scenario.yaml: studies of any pillar from a file

console = Console()
UNFUSED_LOSS_HELP = "Unfused fp32 cross-entropy (Megatron-LM's default) instead of the stack's loss kernel."
# The built-in stacks are the catalog's stack files (each file's stem is its id), listed from the package's
# catalog folder so that a stack added there appears here without an edit (file names only: the CLI's startup
# imports no YAML parser).
_STACK_FILES = sorted((Path(__file__).resolve().parents[1] / "catalog" / "stacks").glob("*.yaml"))
FRAMEWORK_HELP = ("Training stack: megatron (default), "
                  + ", ".join(p.stem for p in _STACK_FILES if p.stem != "megatron")
                  + ", or a stack YAML file. Plan fields left unset (zero, grads, sp, tp_overlap, dispatcher) take the "
                  "stack's defaults.")
WIDE = typer.Option(False, "--wide", help="Full-width tables (default: fit 80 columns, abbreviations explained).")
PROFILE_HELP = ("Calibration profile of the chip (from `windtunnel calibrate ... --out`), overlaid on the shipped "
                "calibration.")


def _flag(value: bool) -> bool | None:
    """A kernel flag given on the command line overrides the stack; absent, the stack decides."""
    return False if value else None


def _emit_json(data: dict) -> None:
    from windtunnel.report.jsonout import dumps as strict_json

    sys.stdout.write(strict_json(data, indent=2, sort_keys=True) + "\n")


from windtunnel.cli.keys import PLAN_KEYS, epilog  # noqa: E402 - names only, no model import

PLAN_EPILOG = epilog(PLAN_KEYS, "windtunnel train plan-keys")


@train_app.command("plan-keys")
def train_plan_keys(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List every plan key (the Plan model's fields): values, default, meaning; one line each."""
    from windtunnel.cli.keys import plan_key_rows, print_keys

    print_keys(plan_key_rows(), as_json, "plan keys (--plan key=value,...; bare flags sp, tp_overlap, ep_overlap, "
                                         "dualpipe; recompute=full:N):")


@train_app.command("simulate", epilog=PLAN_EPILOG)
def train_simulate(
    model: str = typer.Option(..., help="Catalog model id, model YAML, or Hugging Face config.json."),
    hardware: str = typer.Option(..., help="Chip id (uses its default cluster), cluster id, or cluster YAML."),
    devices: int = typer.Option(..., help="Number of devices in the job."),
    seq_len: int = typer.Option(4096, help="Sequence length (tokens)."),
    global_batch: int = typer.Option(..., help="Global batch (sequences per step)."),
    plans: list[str] = typer.Option([], "--plan", help="Plan, e.g. tp=8,pp=16,cp=1,vpp=1,mbs=1,recompute=selective,"
                                    "sp=true,zero=1 (one; `compare train` takes several)."),
    moe_imbalance: float = typer.Option(1.1, help="Tokens on the busiest expert rank / the balanced share."),
    no_flash: bool = typer.Option(False, "--no-flash", help="Unfused attention (scores materialised)."),
    unfused_loss: bool = typer.Option(False, "--unfused-loss", help=UNFUSED_LOSS_HELP),
    framework: str = typer.Option("megatron", help=FRAMEWORK_HELP),
    profile: Path | None = typer.Option(None, help=PROFILE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    trace: Path | None = typer.Option(None, help="Write the simulated step as a Chrome trace (Perfetto)."),
    trace_detail: str = typer.Option("block", help="block (pipeline blocks of every rank) or op (also each operator "
                                     "of --trace-rank on its compute, TP, CP, EP, DP and host streams; the first 2 "
                                     "micro-batches, the rest as blocks)."),
    trace_rank: int = typer.Option(0, help="Pipeline rank whose operators --trace-detail op draws."),
    what_if: list[str] = typer.Option([], "--what-if", help="Hardware what-if KEY=VALUE (repeatable; VALUE xF or "
                                      "a quantity with its unit): shown beside the base result."),
    exact: bool = typer.Option(False, "--exact", help="Play every micro-batch on the event engine (default: the "
                               "steady-state path, within 0.1%: warm-up, a few steady periods and cool-down played, the "
                               "rest extended)."),
    batch_shape: str = typer.Option("", help="ONNX models: " + BATCH_SHAPE_HELP + " The global batch counts samples."),
) -> None:
    """Simulate one training step of MODEL on HARDWARE with a parallel PLAN."""
    if len(plans) > 1:
        raise WindtunnelError(f"Option '--plan' was given {len(plans)} times; `train simulate` runs one plan. To see "
                              "several side by side, use `windtunnel compare train --plan A --plan B ...`.", field="plan")
    plan = plans[0] if plans else ""
    if trace_detail not in ("block", "op"):
        raise WindtunnelError(f"Field 'trace-detail' is '{trace_detail}'; valid: block, op.", field="trace-detail")
    if trace is None and (trace_detail != "block" or trace_rank != 0):
        raise WindtunnelError("--trace-detail and --trace-rank shape the trace: give --trace FILE too.", field="trace")
    if trace_rank < 0:
        raise WindtunnelError(f"Field 'trace-rank' is {trace_rank}; a pipeline rank is >= 0.", field="trace-rank")
    from windtunnel.api import simulate_training
    from windtunnel.report.tables import training_table
    from windtunnel.report.trace import trace_json
    from windtunnel.specs.yamlio import write_atomic

    result = simulate_training(model, hardware, devices, seq_len=seq_len, global_batch=global_batch, plan=plan,
                               flash_attention=_flag(no_flash), fused_loss=_flag(unfused_loss),
                               moe_imbalance=moe_imbalance, keep_trace=trace is not None, framework=framework,
                               profile=profile, batch_shape=batch_shape or None, exact=exact,
                               trace_detail=trace_detail, trace_rank=trace_rank)
    if trace is not None:
        write_atomic(trace, trace_json(result.trace, title=f"{result.model} {result.plan}", ops=result.trace_ops))
    if what_if:
        from windtunnel.cli.explain import simulate_with_what_if

        simulate_with_what_if(result, what_if, dict(model=model, hardware=hardware, devices=devices, seq_len=seq_len,
                                                    global_batch=global_batch, plan=plan, framework=framework,
                                                    flash_attention=_flag(no_flash), fused_loss=_flag(unfused_loss),
                                                    moe_imbalance=moe_imbalance, profile=profile), as_json)
        return
    if as_json:
        _emit_json(result.to_json_dict())
    else:
        training_table(result, console)
        for line in (a for a in result.assumptions if profile is not None and a.startswith("profile")):
            console.print(line, markup=False)
        if trace is not None:
            console.print(f"trace written to {trace} (open in https://ui.perfetto.dev)")


def _parse_pins(pins: list[str]) -> dict[str, list]:
    """``--pin tp=4,8 --pin recompute=none,full`` -> {'tp': [4, 8], 'recompute': ['none', 'full']}."""
    from windtunnel.train.space import DIMENSIONS

    out: dict[str, list] = {}
    for pin in pins:
        if "=" not in pin:
            raise WindtunnelError(f"Pin '{pin}' is not of the form dimension=value[,value...] (field 'pin'), "
                                  "e.g. --pin tp=4,8.", field="pin")
        key, values = (part.strip() for part in pin.split("=", 1))
        key = {"mb": "mbs", "micro_batch": "mbs", "overlap": "tp_overlap"}.get(key, key)
        if key not in DIMENSIONS:
            raise WindtunnelError(f"Unknown search dimension '{key}' (field 'pin'); dimensions: {', '.join(DIMENSIONS)}.",
                                  field="pin")
        parsed: list = []
        for value in values.split(","):
            value = value.strip()
            if key in ("sp", "tp_overlap"):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise WindtunnelError(f"Pin '{key}' takes true/false, got '{value}'.", field=key)
                parsed.append(value.lower() in ("true", "1"))
            elif key in ("recompute", "schedule", "order"):
                parsed.append(value.lower())
            else:
                try:
                    parsed.append(int(value))
                except ValueError as exc:
                    raise WindtunnelError(f"Pin '{key}' takes integers, got '{value}'.", field=key) from exc
        out[key] = parsed
    return out


def _check_fault_options(faults: str | None, checkpoint_every: str | None, storage_bandwidth: str | None) -> None:
    """The failure-ranking options are read before the search (a bad one would surface after it), and only
    with --faults (without it they would be silently ignored)."""
    from windtunnel.avail.units import parse_duration
    from windtunnel.job.units import parse_bandwidth

    for option, value, parse in (("--checkpoint-every", checkpoint_every, parse_duration),
                                 ("--storage-bandwidth", storage_bandwidth, parse_bandwidth)):
        if value is not None:
            parse(value, option.lstrip("-"))
            if faults is None:
                raise WindtunnelError(f"Option {option} applies to the failure ranking; give --faults too (or leave "
                                      f"{option} out).", field=option.lstrip("-"))


@train_app.command("search", epilog=PLAN_EPILOG)
def train_search(
    model: str = typer.Option(..., help="Catalog model id, model YAML, or Hugging Face config.json."),
    hardware: str = typer.Option(..., help="Chip id (uses its default cluster), cluster id, or cluster YAML."),
    devices: int = typer.Option(..., help="Number of devices in the job."),
    seq_len: int = typer.Option(4096, help="Sequence length (tokens)."),
    global_batch: int = typer.Option(..., help="Global batch (sequences per step)."),
    precision: str = typer.Option("bf16", help="bf16, fp16 or fp8."),
    pin: list[str] = typer.Option([], help="Pin a dimension to values, e.g. --pin tp=4,8 --pin recompute=none,full."),
    top: int = typer.Option(20, help="Plans to show."),
    refine: int = typer.Option(32, help="Best screened plans refined with the event engine."),
    baseline: str | None = typer.Option(None, help="A plan to compare with (reports the gain)."),
    moe_imbalance: float = typer.Option(1.1, help="Tokens on the busiest expert rank / the balanced share."),
    no_flash: bool = typer.Option(False, "--no-flash", help="Unfused attention (scores materialised)."),
    unfused_loss: bool = typer.Option(False, "--unfused-loss", help=UNFUSED_LOSS_HELP),
    cuda_graphs: str = typer.Option("none", help="How kernels are issued in every plan: none (eager), modules "
                                    "(attention, dense MLP, MoE router and preprocess captured), full (whole-step "
                                    "graph) or scopes joined by '+' (attn, mlp, moe_router, moe_preprocess)."),
    grads: str | None = typer.Option(None, help="Main-gradient dtype in every plan (fp32 or bf16; also the DP "
                                     "reduction; default: the stack's)."),
    moments: str = typer.Option("fp32", help="Adam moment dtype in every plan (fp32 or bf16)."),
    dispatcher: str | None = typer.Option(None, help="MoE token dispatcher in every plan: deepep (deduplicating, "
                                          "DeepEP/HybridEP), hybridep (HybridEP with the permutation fused into its "
                                          "kernels), alltoall (plain all-to-all) or allgather (default: the stack's)."),
    framework: str = typer.Option("megatron", help=FRAMEWORK_HELP),
    fp8_recipe: str = typer.Option("tensor", help="FP8 scaling in every plan with --precision fp8: tensor (one "
                                   "scale per tensor) or mx (MXFP8 1x32 blocks; Blackwell)."),
    fixed: str = typer.Option("", help="Kernel paths every plan runs, in --plan syntax: expert_gemm, fp8_attention, "
                              "fp8_dispatch, act_fp8_store, grad_accum_fusion, embedding_lookup, device_connections "
                              "(e.g. 'expert_gemm=fused_mlp,fp8_attention=true')."),
    profile: Path | None = typer.Option(None, help=PROFILE_HELP),
    backend: str = typer.Option("local", help="local (processes on this machine) or ray."),
    address: str | None = typer.Option(None, help="Ray cluster address ('auto' joins a running cluster)."),
    workers: int | None = typer.Option(None, help="Local processes (default: all cores)."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted search from its state file."),
    state: Path | None = typer.Option(None, help="State file for --resume (default: .windtunnel-search-<hash>.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    out: Path | None = typer.Option(None, help="Write the ranked plans as CSV or Parquet."),
    report: Path | None = typer.Option(None, help="Write a self-contained HTML report with plots."),
    what_if: list[str] = typer.Option([], "--what-if", help="Search on what-if hardware, KEY=VALUE (repeatable; "
                                      "VALUE xF or a quantity with its unit, e.g. hbm_capacity=96GiB)."),
    batch_shape: str = typer.Option("", help="ONNX models: " + BATCH_SHAPE_HELP + " The global batch counts samples."),
    faults: str | None = typer.Option(None, help="Also rank refined plans by goodput after faults: a fault profile "
                                      "(catalog:NAME or YAML), e.g. catalog:llama3-54day."),
    policy: str = typer.Option("restart-from-checkpoint", help="Recovery policy for --faults (as in `avail`)."),
    checkpoint_every: str | None = typer.Option(None, help="Checkpoint interval for --faults (default: Daly's)."),
    storage_bandwidth: str | None = typer.Option(None, help="Checkpoint storage bandwidth for --faults, e.g. 2TB/s."),
    wide: bool = WIDE,
) -> None:
    """Search the parallel-plan space for the fastest plan that fits: enumerate, prune, screen, refine."""
    from windtunnel.api import resolve_model
    from windtunnel.cli.progress import progress_reporter
    from windtunnel.report.search_report import search_table, write_html, write_table
    from windtunnel.search.backends import make_backend
    from windtunnel.specs.hardware import load_hardware
    from windtunnel.specs.plan import Plan
    from windtunnel.specs.plan_checks import cuda_graphs_value
    from windtunnel.specs.stack import load_stack, with_stack_defaults
    from windtunnel.train.search import search_training
    from windtunnel.train.space import SearchSpace

    if precision not in ("bf16", "fp16", "fp8"):
        raise WindtunnelError(f"Field 'precision' is '{precision}'; valid: bf16, fp16, fp8.", field="precision")
    stack_plan = with_stack_defaults(Plan(), load_stack(framework))
    grads = stack_plan.grads if grads is None else grads
    dispatcher = stack_plan.dispatcher if dispatcher is None else dispatcher
    try:
        cuda_graphs = cuda_graphs_value(cuda_graphs)
    except ValueError as err:
        raise WindtunnelError(f"Field 'cuda_graphs' is '{cuda_graphs}': {err}.", field="cuda_graphs") from None
    for name, value in (("grads", grads), ("moments", moments)):
        if value not in ("fp32", "bf16"):
            raise WindtunnelError(f"Field '{name}' is '{value}'; valid: fp32, bf16.", field=name)
    if dispatcher not in ("deepep", "hybridep", "alltoall", "allgather"):
        raise WindtunnelError(f"Field 'dispatcher' is '{dispatcher}'; valid: deepep, hybridep, alltoall, allgather.",
                              field="dispatcher")
    _check_fault_options(faults, checkpoint_every, storage_bandwidth)
    spec, dag = resolve_model(model, batch_shape or None)
    if dag is not None and not hasattr(dag, "imported"):
        raise WindtunnelError("Plan search needs a transformer model (catalog, YAML or config.json) or an ONNX model, "
                              "not a per-rank operator-DAG YAML.")
    if dag is not None:  # an ONNX operator DAG: its own small space, every plan simulated (graph/dag_search.py)
        from windtunnel.train.dag_search import search_dag

        unused = [name for name, value in (("--pin", pin), ("--baseline", baseline), ("--what-if", what_if),
                                           ("--profile", profile), ("--faults", faults)) if value]
        if unused:
            raise WindtunnelError(f"Option {unused[0]} applies to transformer searches; a DAG search takes --devices, "
                                  "--global-batch, --batch-shape, --precision, --framework, --top and --json.",
                                  field=unused[0].lstrip("-"))

        with progress_reporter() as progress:
            document = search_dag(spec, dag, load_hardware(hardware, devices), global_batch, precision=precision,
                                  framework=framework, top=top, progress=progress)
        _emit_json(document) if as_json else search_table(document, console, wide=wide)
        return
    cluster = load_hardware(hardware, devices)
    cluster.chip.peak(precision)
    from windtunnel.profile import apply_profile

    fitted, profile_notes = apply_profile(profile, cluster.chip.id, framework)
    from windtunnel.train.variant import hardware_variant

    cluster, fitted, what = hardware_variant(cluster, fitted, framework, what_if)
    space = SearchSpace(spec, cluster, seq_len, global_batch, precision=precision, moe_imbalance=moe_imbalance,
                        choices=_parse_pins(pin), flash_attention=_flag(no_flash), fused_loss=_flag(unfused_loss),
                        cuda_graphs=cuda_graphs, grads=grads, moments=moments, dispatcher=dispatcher,
                        fp8_recipe=fp8_recipe, fixed=fixed,
                        framework=load_stack(framework).id, fitted_override=fitted)
    state_path = state or Path(f".windtunnel-search-{space.fingerprint()}.json")
    runner = make_backend(backend, address=address, workers=workers)
    try:
        with progress_reporter() as progress:
            document = search_training(space, runner, top=top, refine_count=refine, baseline=baseline,
                                       state_path=state_path, resume=resume, progress=progress)
    except KeyboardInterrupt:
        sys.stderr.write(f"interrupted; refined results so far are in {state_path}; rerun with --resume\n")
        raise typer.Exit(130) from None
    finally:
        runner.close()
    if profile_notes:
        document["profile"] = profile_notes[0]
    if what:
        document["what_if"] = what.label
    if faults is not None:
        from windtunnel.cli.job import add_failure_ranking

        add_failure_ranking(document, model, hardware, devices, faults, policy, checkpoint_every, storage_bandwidth,
                            framework, profile)
    if out is not None:
        write_table(document, out)
    if report is not None:
        write_html(document, report)
    if as_json:
        _emit_json(document)
    else:
        search_table(document, console, wide=wide)
        if faults is not None:
            from windtunnel.cli.job import print_failure_ranking

            print_failure_ranking(document, console)
        for path in (out, report):
            if path is not None:
                console.print(f"written: {path}")
    if state is None and state_path.exists():
        state_path.unlink()  # a finished search needs no state file unless the user named one


@validate_app.command("training")
def validate_training(
    csv_path: Path = typer.Argument(..., help="CSV in the schema of shared/reference/training_runs.csv."),
    out: Path | None = typer.Option(None, help="Write the Markdown report here (e.g. validation/REPORT.md)."),
    as_json: bool = typer.Option(False, "--json", help="Print rows and summary as JSON."),
    profile: list[Path] = typer.Option([], help="Calibration profile(s), one per chip and stack: every row is "
                                       "predicted before and after its chip's profile (repeat for several chips)."),
    wide: bool = WIDE,
) -> None:
    """Predict every row of a training-measurement CSV and report the errors."""
    from windtunnel.validation import training as validation
    from windtunnel.validation.rows import run_validation

    if profile:
        from windtunnel.cli.calibrate import validate_with_profiles

        if out is not None:
            raise WindtunnelError("--out writes the plain validation report; with --profile use --json (or the table) "
                                  "instead.", field="out")
        validate_with_profiles(csv_path, profile, as_json)
        return
    from windtunnel.cli.progress import progress_reporter

    with progress_reporter() as progress:
        run_validation(validation, "training", csv_path, out, as_json, console, _emit_json, progress=progress,
                       wide=wide)


@validate_app.command("all")
def validate_all(
    csv_paths: list[Path] | None = typer.Argument(None, help="Training CSVs (default: validation/training_runs.csv, "
                                                  "validation/training_runs_2.csv, validation/extra_training_runs.csv)."),
    out: Path | None = typer.Option(None, help="Write the Markdown report here (e.g. validation/ACCURACY.md)."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole document (rows, slices, ranking) as JSON."),
    baseline: Path | None = typer.Option(None, help="A previous `validate all --json` output: list rows whose |error| "
                                         "grew by more than 1 point."),
    bands_out: Path | None = typer.Option(None, "--bands-out", help="Write the error bands derived from the residuals "
                                          "here (e.g. src/windtunnel/catalog/bands.yaml)."),
) -> None:
    """Predict every row of every training CSV once: accuracy per slice, plans over memory, ranking, bands."""
    from windtunnel.cli.progress import progress_reporter
    from windtunnel.specs.yamlio import write_atomic
    from windtunnel.validation.bands import bands_yaml, derive_bands, sources_of
    from windtunnel.validation.fidelity import (
        DEFAULT_CSVS,
        build_document,
        predict_files,
        print_summary,
        report_markdown,
    )

    paths = [str(p) for p in csv_paths] if csv_paths else list(DEFAULT_CSVS)
    with progress_reporter() as progress:
        files = predict_files(paths, progress=progress)
    pairs = [(f.path, f.results) for f in files]
    bands = derive_bands(pairs)
    document = build_document(files, baseline=baseline, bands=bands)
    command = " ".join(["windtunnel validate all", *paths, *(f"--{name} {value}" for name, value in
                                                             (("out", out), ("bands-out", bands_out)) if value)])
    if out is not None:
        write_atomic(out, report_markdown(document, command))
    if bands_out is not None:
        write_atomic(bands_out, bands_yaml(bands, sources_of(pairs), command))
    if as_json:
        _emit_json(document)
        return
    print_summary(document, console)
    for path in (out, bands_out):
        if path is not None:
            console.print(f"written: {path}")


@catalog_app.command("list")
def catalog_list(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List catalog chips, clusters, models and training stacks."""
    from windtunnel.specs.hardware import chip_names, cluster_names
    from windtunnel.specs.model import model_names
    from windtunnel.specs.stack import stack_names

    data = {"chips": chip_names(), "clusters": cluster_names(), "models": model_names(), "stacks": stack_names()}
    if as_json:
        _emit_json(data)
    else:
        for key, values in data.items():
            console.print(f"[bold]{key}[/]: {', '.join(values)}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors (ours and the option parser's) become one `error:` paragraph and exit code 2, never
    a traceback. ``argv`` (default: sys.argv[1:]) lets tests run the command in-process."""
    import signal

    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # typer vendors click
    from typer.exceptions import Abort

    def terminated(signum, frame):  # SIGTERM as Ctrl-C: searches stop their workers and print the resume hint
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        code = app(args=argv, prog_name="windtunnel", standalone_mode=False)
    except WindtunnelError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
    except NoArgsIsHelpError as exc:  # a bare group: its help, as typer prints it
        from typer import rich_utils

        rich_utils.rich_format_error(exc)
        sys.exit(exc.exit_code)
    except UsageError as exc:  # unknown option, missing value, a value of the wrong type
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        sys.stderr.write(f"error: {' '.join(exc.format_message().split())}{hint}\n")
        sys.exit(2)
    except ClickException as exc:
        sys.stderr.write(f"error: {' '.join(exc.format_message().split())}\n")
        sys.exit(2)
    except Abort:
        sys.stderr.write("aborted\n")
        sys.exit(1)
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
