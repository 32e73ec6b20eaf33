"""Malformed command lines for every verb (issue 20): a seeded generator the CLI fuzz test replays in-process.

Each case is a valid, quick base invocation of one verb with ONE thing made wrong: an option given a value of the
wrong type, a non-finite, negative, zero or huge number, a quantity without its unit or with the wrong one, an unknown
name, a malformed spec string, or a malformed file (Hugging Face config, cluster YAML, stack, profile, fault profile,
CSV, ONNX, trace). Every case must be refused with one clear error (exit 2).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"

TRAIN = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--seq-len", "2048",
         "--global-batch", "8", "--plan", "tp=1"]
TRAFFIC = "poisson:rate=4,input=200,output=20,requests=20"
SERVE = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--deployment", "mixed:tp=1", "--traffic", TRAFFIC]
AVAIL = ["--devices", "1024", "--step-time", "10s", "--horizon", "1d"]
PINS = ["--pin", "tp=1", "--pin", "pp=1", "--pin", "cp=1", "--pin", "vpp=1", "--pin", "zero=1", "--pin", "mbs=1",
        "--pin", "recompute=none", "--workers", "1", "--refine", "1", "--top", "1"]
LOGS = DATA / "profiling"

BASES: dict[str, list[str]] = {
    "train simulate": ["train", "simulate", *TRAIN],
    "train explain": ["train", "explain", *TRAIN],
    "train sensitivity": ["train", "sensitivity", *TRAIN],
    "compare train": ["compare", "train", *TRAIN],
    "train search": ["train", "search", *TRAIN[:-2], *PINS],
    "train job": ["train", "job", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "64",
                  "--phase", "seq=4096,tokens=1B,batch=256,plan=tp=2", "--replications", "2"],
    "avail simulate": ["avail", "simulate", *AVAIL, "--replications", "2"],
    "avail markov": ["avail", "markov", *AVAIL],
    "avail optimize": ["avail", "optimize", *AVAIL, "--replications", "2"],
    "avail target": ["avail", "target", *AVAIL, "--replications", "2"],
    "avail checkpoint-interval": ["avail", "checkpoint-interval", "--mtbf", "1h", "--checkpoint-cost", "1min"],
    "avail mttf": ["avail", "mttf", "--failures-per-1000-node-days", "1", "--devices", "8"],
    "avail serve": ["avail", "serve", "--model", "llama3-8b", "--hardware", "h100-sxm", "--deployment",
                    "mixed:tp=1,replicas=2", "--traffic", TRAFFIC],
    "avail goodput": ["avail", "goodput", *TRAIN],
    "avail profiles": ["avail", "profiles", "--devices", "8"],
    "infer simulate": ["infer", "simulate", *SERVE],
    "infer explain": ["infer", "explain", *SERVE],
    "infer dynamic": ["infer", "dynamic", *SERVE[:4], "--deployment", "prefill:tp=1;decode:tp=1", *SERVE[6:]],
    "infer autoscale": ["infer", "autoscale", *SERVE],
    "infer search": ["infer", "search", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "1",
                     "--traffic", TRAFFIC, "--workers", "1", "--top", "1", "--requests", "20"],
    "infer calibrate": ["infer", "calibrate", "@CSV", "--out", "@OUT"],
    "validate training": ["validate", "training", "@CSV"],
    "validate inference": ["validate", "inference", "@CSV"],
    "validate all": ["validate", "all", "@CSV"],
    "calibrate training": ["calibrate", "training", "@CSV", "--out", "@OUT", "--hardware", "h100-sxm"],
    "calibrate collectives": ["calibrate", "collectives", str(LOGS / "all_reduce_perf_8xh100.log"), "--hardware",
                              "h100-sxm"],
    "calibrate trace": ["calibrate", "trace", str(LOGS / "kineto_llama3-8b_h100_2steps.json"), *TRAIN],
    "graph show": ["graph", "show", "onnx:resnet50"],
    "graph infer": ["graph", "infer", "onnx:resnet50", "--hardware", "a100-80g", "--devices", "8", "--batch", "64"],
    "probe": ["probe", "--from-record", "@JSON"],
    "catalog list": ["catalog", "list"],
}

INT_BAD = ["abc", "1.5", "nan", "inf", "", "0x10", "1e3", "--", "99999999999999999999999999", "-99999999999999999999"]
POS_INT_BAD = ["0", "-1", "-8"]
FLOAT_BAD = ["abc", "nan", "inf", "-inf", "1e400", "-1e400", "", "1,5", "--"]
DURATION_BAD = ["abc", "5parsecs", "-1s", "nans", "infs", "1e400s", "", "s", "5 y y", "1e308y", "0x1s", "NaNh",
                "-infs", "10GB"]
BANDWIDTH_BAD = ["abc", "5", "5s", "-1TB/s", "nanTB/s", "infTB/s", "1e400GB/s", "", "0TB/s", "1e-300B/s"]
NAME_BAD = ["nonexistent-thing", "", " ", "x" * 300, "../../etc/passwd", "llama3-8b;rm -rf", "\u00e9\u00e8", "NaN",
            "catalog:", "catalog:nope", "-1"]
PLAN_BAD = ["tp=abc", "tp=0", "tp=-1", "tp=nan", "tp=inf", "tp", "=", ",,x", "tp=1,tp=2", "foo=1", "tp=1e30",
            "tp=99999999999999999999", "recompute=maybe", "mbs=0", "mbs=-1", "pp=1000000000", "zero=7", "sp=maybe",
            "offload=-1", "offload=1e30",
            "tp=1,mtp=100000000000000000000", "vpp=0", "cp=0", "ep=0", "tp=1," + "x" * 100_000, "tp=1;;pp=abc",
            "tp=1.5", "tp=" + "9" * 400, "mbs=99999999999999999999", "schedule=nope", "tp=\x00"]
DEPLOY_BAD = ["mixed:tp=abc", "mixed;tp=1", "mixed:tp", "bogus:tp=1", "mixed:tp=1,replicas=1000000000", "mixed:tp=1,replicas=0", "mixed:tp=1,,replicas=x",
              "prefill:tp=1", "mixed:tp=1;;decode", "mixed:tp=1,replicas=-1", "mixed:tp=nan", "mixed:tp=1,replicas=1e9",
              "mixed:tp=1,replicas=inf", "mixed:tp=1,batch=0", "mixed:tp=1,batch=-1", "mixed:tp=0", ":", "",
              "mixed:tp=1,foo=bar", "mixed:tp=1,replicas=99999999999999999999", "mixed:tp=1;router=random",
              "x" * 100_000, "mixed:tp=1,overhead=1e308", "mixed:tp=1,overhead=nan", "mixed:tp=1,overhead=-1"]
TRAFFIC_BAD = ["poisson:rate=abc,input=10,output=10", "poisson:rate=inf,input=10,output=10",
               "poisson:rate=0,input=10,output=10", "poisson:rate=-1,input=10,output=10",
               "poisson:rate=2,input=fixed(inf),output=10", "poisson:rate=2,input=fixed(-1),output=10",
               "poisson:rate=2,input=fixed(nan),output=10", "poisson:rate=2,input=lognormal(nan,1),output=10",
               "poisson:rate=2,input=lognormal(100,inf),output=10", "poisson:rate=2,input=10,output=10,requests=1e12",
               "poisson:rate=2,input=10,output=10,requests=0", "poisson:rate=2,input=10,output=10,requests=-5",
               "bogus:rate=2", "trace:missing.csv", "trace:@BADCSV", "poisson:rate=2,input=10", "poisson", "poisson:",
               "poisson:rate=2,input=0,output=10", "poisson:rate=2,input=10,output=0",
               "poisson:rate=2,input=1e30,output=10", "poisson:rate=2,input=10,output=10,foo=1",
               "poisson:rate=1e308,input=10,output=10", "poisson:rate=2,input=fixed(),output=10",
               "poisson:rate=2,input=fixed(1,2,3),output=10", "poisson:rate=2,input=lognormal(100),output=10",
               "poisson:rate=2,input=((((,output=10", "x" * 100_000, "poisson:rate=1e-300,input=10,output=10"]
SLO_BAD = ["ttft=abc", "ttft=-1s", "ttft=inf", "ttft=1parsec", "bogus=1s", "ttft", "ttft=nans", "ttft=1s,ttft=2s",
           "=", "ttft=", "tpot=0s", "ttft=1e400s", "ttft=5", "ttft=1s;tpot=1s"]
PHASE_BAD = ["seq=abc,tokens=1B,batch=256,plan=tp=2", "seq=4096,tokens=-1B,batch=256,plan=tp=2",
             "seq=4096,tokens=100Q,batch=256,plan=tp=2", "seq=4096,tokens=1B,batch=0,plan=tp=2",
             "seq=4096,tokens=1B,batch=256,plan=tp=abc", "seq=0,tokens=1B,batch=256,plan=tp=2",
             "seq=4096,tokens=nanB,batch=256,plan=tp=2", "seq=4096,tokens=infB,batch=256,plan=tp=2", "", "=",
             "seq=4096", "foo=1", "seq=4096,tokens=1B,batch=1e30,plan=tp=2", "seq=4096,tokens=1e400B,batch=256",
             "seq=4096,tokens=1B,batch=99999999999999999999,plan=tp=2"]
POLICY_BAD = ["nope", "hot-spare,spares=-1", "hot-spare,spares=abc", "hot-spare,spares=1e30", "restart-from-checkpoint,foo=1",
              "", ",", "hot-spare,spares=nan", "hot-spare,spares=99999999999999999999", "elastic-shrink,spares=inf"]
WHATIF_BAD = ["tflops=x2", "flops=x0", "flops=x-1", "flops=xnan", "flops=xinf", "hbm_capacity=-1GiB", "flops", "=x2",
              "flops=x1e400", "hbm_capacity=nanGiB", "scale_up_bandwidth=x0", "hbm_bandwidth=5parsec", "flops=2"]
BATCH_SHAPE_BAD = ["nodes=abc", "nodes=-1", "bogus=1", "nodes", "nodes=1e30,edges=1", "nodes=0,edges=0",
                   "nodes=99999999999999999999,edges=1"]
PRICE_BAD = ["abc", "2.5", "-1/device-hour", "nan/device-hour", "inf/device-hour", "2.5/parsec"]
SEED_BAD = ["-1", "abc", "1.5", "nan"]
REPL_BAD = ["0", "-1", "abc", "1000000000", "99999999999999999999"]
HUGE_INT = ["1000000000000000000", "1000000000", str(2**63), str(2**64 + 1)]

HF_GOOD = {"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8, "num_hidden_layers": 4,
           "vocab_size": 32000, "intermediate_size": 4096, "num_key_value_heads": 8}
HF_KEYS = ["hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "intermediate_size",
           "num_key_value_heads", "head_dim", "max_position_embeddings", "num_local_experts", "num_experts_per_tok",
           "n_routed_experts", "moe_intermediate_size", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
           "qk_nope_head_dim", "v_head_dim", "first_k_dense_replace", "n_shared_experts", "num_experts"]
HF_VALUES = [-1, "big", [], {}, 2.5, True, float("inf"), float("nan"), 2**64, 10**30, -(2**63), "NaN", 1e-300]
HF_REQUIRED = {"hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "num_local_experts",
               "num_experts_per_tok", "moe_intermediate_size", "num_experts", "kv_lora_rank", "qk_rope_head_dim",
               "qk_nope_head_dim", "v_head_dim"}


def _hf_configs(rng: random.Random) -> list:
    """Broken Hugging Face configs: wrong types, zeros, non-finite, missing keys, wrong shapes."""
    out: list = [[1, 2], "config", 3, None, {}, {"model_type": "llama"}, {**HF_GOOD, "model_type": 7}]
    for name in sorted(DATA.glob("hf/*.json")):
        real = json.loads(name.read_text())
        for key in [k for k in HF_KEYS if k in real]:
            if key in HF_REQUIRED:
                out.append({k: v for k, v in real.items() if k != key})  # a key missing
            out.append({**real, key: rng.choice(HF_VALUES)})
    for key in HF_KEYS:
        out.append({**HF_GOOD, key: rng.choice(HF_VALUES)})
    for key in ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"):
        out.append({**HF_GOOD, key: 0})
    out.append({**HF_GOOD, "model_type": "deepseek_v3", "kv_lora_rank": 512})
    out.append({**HF_GOOD, "num_hidden_layers": 2**64, "num_nextn_predict_layers": 2**64})
    return out


def _json_text(value) -> str:
    return json.dumps(value, allow_nan=True)


NESTED = "[" * 100_000 + "]" * 100_000
CLUSTER_YAML = ["clusters: {}\n", "clusters: null\n", "- a\n- b\n", "", "clusters: [1, 2]\n", ":::\n", "\t- x",
                "clusters:\n  x: 3\n", "clusters:\n  c:\n    chip: nope\n    tiers: []\n",
                "clusters:\n  c:\n    chip: h100-sxm\n    tiers:\n      - {name: nvlink, size: 8, bandwidth: .inf, "
                "latency: 1e-6}\n",
                "clusters:\n  c:\n    chip: h100-sxm\n    tiers:\n      - {name: nvlink, size: 8, bandwidth: 1e-300, "
                "latency: .inf}\n",
                "clusters:\n  c:\n    chip: h100-sxm\n    tiers:\n      - {name: nvlink, size: 0, bandwidth: 1e11, "
                "latency: -1}\n",
                "a: &a [*a]\n", "x: " + "[" * 5000 + "]" * 5000 + "\n", "!!python/object:os.system {}\n"]
PROFILE_TEXT = ["", "[1,2]\n", "profile: null\n", "chip: h100-sxm\nparameters: 7\n", ":::\n",
                "chip: h100-sxm\nparameters:\n  gemm.bf16: .nan\n", "chip: h100-sxm\nparameters:\n  nope: 1\n",
                "chip: h100-sxm\nparameters:\n  gemm.bf16: -1\n", "\x00\x01\x02"]
STACK_TEXT = ["", "[1]\n", "id: x\nkernels: 7\n", "id: x\nbase: nope\n", ":::\n", "id: x\nkernels:\n  flash: maybe\n"]
FAULT_TEXT = ["", "[1]\n", "components: 7\n", "components:\n  - {name: gpu, per: device, rate: -1}\n",
              "components:\n  - {name: gpu, per: device, rate: .nan}\n", "components:\n  - {name: gpu, per: nope}\n",
              ":::\n", "components: []\n", "components:\n  - {name: gpu, per: device, rate: .inf}\n"]
CSV_TEXT = ["", "a,b,c\n1,2,3\n", "\x00\x00\x00", "id\n", "id,model,hardware\nr1,nope,h100-sxm\n",
            "id,model,hardware,devices\nr1,llama3-8b,h100-sxm,abc\n", "\"unterminated\n", "id," * 5000 + "\n",
            "id,model,hardware,devices,global_batch,seq_len,tp\nr1,llama3-8b,h100-sxm,-8,nan,inf,0\n"]
ONNX_BYTES = [b"", b"garbage" * 10, bytes(range(256)) * 4, b"\x08\x07\x12\x04test\x3a\xff\xff\xff\xff\x0f",
              b"\x0a" + b"\xff" * 20]
TRACE_TEXT = ["", "[]", "{}", "{\"traceEvents\": 7}", "{\"traceEvents\": [{\"ph\": \"X\", \"dur\": \"abc\"}]}",
              "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": NaN, \"dur\": Infinity, \"name\": \"gemm\"}]}", NESTED]
LOG_TEXT = ["", "garbage\n", "#  size count type redop root time algbw busbw\n8 2 float sum -1 nan nan nan 0\n",
            "\x00\x01"]
RECORD_TEXT = ["", "[]", "{}", "{\"chip\": 7}", NESTED, "{\"chip\": \"h100-sxm\", \"gemm\": NaN}"]


class Files:
    """Writes each case's broken file under ``root`` with a unique name (loaders may cache by path)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0

    def write(self, suffix: str, content: str | bytes) -> str:
        self.count += 1
        path = self.root / f"case{self.count}{suffix}"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return str(path)


def _set(args: list[str], option: str, value: str) -> list[str]:
    """``args`` with ``option``'s value replaced (or the option appended)."""
    args = list(args)
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    return args


def _mutations(verb: str, base: list[str], rng: random.Random, files: Files) -> list[tuple[str, list[str]]]:
    """Every (description, argv) this generator knows for one verb; the caller samples."""
    opts = set(a for a in base if a.startswith("--"))
    cases: list[tuple[str, list[str]]] = []

    def add(option: str, values, kind: str) -> None:
        for value in values:
            cases.append((f"{verb} {option} {kind}={value[:40]!r}", _set(base, option, value)))

    all_opts = _options(verb)
    for option, kind in all_opts.items():
        if kind == "int":
            add(option, INT_BAD, "int")
        elif kind == "posint":
            add(option, INT_BAD + POS_INT_BAD, "posint")
        elif kind == "float":
            add(option, FLOAT_BAD, "float")
        elif kind == "duration":
            add(option, DURATION_BAD, "duration")
        elif kind == "long-interval":  # the base horizon is a day
            add(option, DURATION_BAD + ["5y", "2d"], "duration")
        elif kind == "bandwidth":
            add(option, BANDWIDTH_BAD, "bandwidth")
        elif kind == "plan":
            add(option, PLAN_BAD, "plan")
        elif kind == "deployment":
            add(option, DEPLOY_BAD, "deployment")
        elif kind == "traffic":
            add(option, [t.replace("@BADCSV", files.write(".csv", rng.choice(CSV_TEXT))) for t in TRAFFIC_BAD],
                "traffic")
        elif kind == "slo":
            add(option, SLO_BAD, "slo")
        elif kind == "phase":
            add(option, PHASE_BAD, "phase")
        elif kind == "policy":
            add(option, POLICY_BAD, "policy")
        elif kind == "what-if":
            add(option, WHATIF_BAD, "what-if")
        elif kind == "batch-shape":
            add(option, BATCH_SHAPE_BAD, "batch-shape")
        elif kind == "price":
            add(option, PRICE_BAD, "price")
        elif kind == "seed":
            add(option, SEED_BAD, "seed")
        elif kind == "replications":
            add(option, REPL_BAD, "replications")
        elif kind == "huge":
            add(option, HUGE_INT + INT_BAD + POS_INT_BAD, "huge")
        elif kind == "name":
            add(option, NAME_BAD, "name")
        elif kind == "model-file":
            add(option, NAME_BAD, "name")
            for config in _hf_configs(rng):
                cases.append((f"{verb} {option} hf={str(config)[:60]!r}",
                              _set(base, option, files.write("/config.json".replace("/", "_"),
                                                             _json_text(config)))))
            add(option, [files.write("_config.json", NESTED), files.write("_config.json", "{not json"),
                         files.write("_config.json", "\x00\xff"), files.write(".yaml", ":::"),
                         files.write(".yaml", "[1, 2]"), files.write(".onnx", rng.choice(ONNX_BYTES)),
                         str(files.root / "missing.json")], "model-file")
        elif kind == "hardware-file":
            add(option, NAME_BAD, "name")
            add(option, [files.write(".yaml", text) for text in CLUSTER_YAML], "cluster-yaml")
        elif kind == "profile-file":
            add(option, [files.write(".yaml", text) for text in PROFILE_TEXT] + [str(files.root / "none.yaml")],
                "profile")
        elif kind == "stack":
            add(option, NAME_BAD, "name")
            add(option, [files.write(".yaml", text) for text in STACK_TEXT], "stack-yaml")
        elif kind == "faults":
            add(option, NAME_BAD, "name")
            add(option, [files.write(".yaml", text) for text in FAULT_TEXT], "faults-yaml")
        elif kind == "choice":
            add(option, NAME_BAD[:6], "choice")
    if "--unknown-option" not in opts:
        cases.append((f"{verb} unknown option", [*base, "--unknown-option", "1"]))
    cases.append((f"{verb} extra argument", [*base, "extra-argument"]))
    if all_opts:
        cases.append((f"{verb} option without its value", [*base, next(iter(all_opts))]))
    cases += _positional_cases(verb, base, rng, files)
    return cases


def _positional_cases(verb: str, base: list[str], rng: random.Random, files: Files) -> list[tuple[str, list[str]]]:
    """Broken positional files: CSVs, ONNX models, traces, logs."""
    out: list[tuple[str, list[str]]] = []

    def swap(marker_or_index, values, kind):
        for value in values:
            args = list(base)
            index = args.index(marker_or_index) if isinstance(marker_or_index, str) else marker_or_index
            args[index] = value
            out.append((f"{verb} {kind}", args))

    if "@CSV" in base:
        swap("@CSV", [files.write(".csv", t) for t in CSV_TEXT] + [str(files.root / "missing.csv"),
                                                                  files.write(".csv", "a,b\n" + "1,2\n" * 10)], "csv")
    if "@JSON" in base:
        swap("@JSON", [files.write(".json", t) for t in RECORD_TEXT] + [str(files.root / "missing.json")], "record")
    if verb in ("graph show", "graph infer"):
        swap(2, [files.write(".onnx", b) for b in ONNX_BYTES] + ["onnx:nope", "nope.onnx", files.write(".yaml", ":::"),
                                                                 files.write(".yaml", "ops: 7\n")], "onnx")
    if verb == "calibrate trace":
        swap(2, [files.write(".json", t) for t in TRACE_TEXT] + [str(files.root / "missing.json")], "trace")
    if verb == "calibrate collectives":
        swap(2, [files.write(".log", t) for t in LOG_TEXT] + [str(files.root / "missing.log")], "log")
    return out


COMMON_TRAIN = {"--model": "model-file", "--hardware": "hardware-file", "--devices": "posint", "--seq-len": "posint",
                "--global-batch": "huge", "--plan": "plan", "--moe-imbalance": "float", "--framework": "stack",
                "--profile": "profile-file", "--what-if": "what-if"}
AVAIL_OPTS = {"--devices": "huge", "--hardware": "hardware-file", "--devices-per-node": "posint", "--faults": "faults",
              "--policy": "policy", "--checkpoint-every": "long-interval", "--checkpoint-cost": "duration",
              "--checkpoint-stall": "duration", "--spares": "int", "--repair": "duration", "--detect": "duration",
              "--restart": "duration", "--step-time": "duration", "--horizon": "duration", "--rate-scale": "float"}
SERVE_OPTS = {"--model": "model-file", "--hardware": "hardware-file", "--deployment": "deployment",
              "--traffic": "traffic", "--slo": "slo", "--seed": "seed", "--profile": "profile-file",
              "--what-if": "what-if"}


def _options(verb: str) -> dict[str, str]:
    """The options of ``verb`` the generator breaks, with the kind of value each takes."""
    table: dict[str, dict[str, str]] = {
        "train simulate": {**COMMON_TRAIN, "--batch-shape": "batch-shape"},
        "train explain": {**COMMON_TRAIN, "--top": "posint"},
        "train sensitivity": {**COMMON_TRAIN, "--delta": "float", "--resource": "choice"},
        "compare train": {k: v for k, v in COMMON_TRAIN.items() if k != "--plan"},
        "train search": {**{k: v for k, v in COMMON_TRAIN.items() if k != "--plan"}, "--precision": "choice",
                         "--cuda-graphs": "choice", "--grads": "choice", "--dispatcher": "choice",
                         "--baseline": "plan", "--faults": "faults", "--checkpoint-every": "duration",
                         "--storage-bandwidth": "bandwidth", "--backend": "choice", "--workers": "posint",
                         "--refine": "posint", "--top": "posint"},
        "train job": {"--model": "model-file", "--hardware": "hardware-file", "--devices": "huge", "--phase": "phase",
                      "--faults": "faults", "--policy": "policy", "--checkpoint-every": "duration",
                      "--storage-bandwidth": "bandwidth", "--price": "price", "--energy-price": "price",
                      "--pue": "float", "--idle-power": "float", "--device-power": "float",
                      "--replications": "replications", "--seed": "seed", "--tokens": "choice"},
        "avail simulate": {**AVAIL_OPTS, "--replications": "replications", "--seed": "seed", "--timeline-bin": "duration"},
        "avail markov": {**AVAIL_OPTS, "--phases": "posint"},
        "avail optimize": {**AVAIL_OPTS, "--knob": "choice", "--target-availability": "float",
                           "--replications": "replications", "--seed": "seed"},
        "avail target": {**AVAIL_OPTS, "--availability": "float", "--ettr": "float", "--replications": "replications",
                         "--seed": "seed"},
        "avail checkpoint-interval": {"--mtbf": "duration", "--checkpoint-cost": "duration", "--restart": "duration",
                                      "--replications": "replications", "--seed": "seed"},
        "avail mttf": {"--failures-per-1000-node-days": "float", "--devices": "huge", "--devices-per-node": "posint"},
        "avail serve": {**{k: SERVE_OPTS[k] for k in ("--model", "--hardware", "--deployment", "--traffic", "--slo")},
                        "--faults": "faults", "--policy": "policy", "--target": "float", "--horizon": "duration",
                        "--replications": "replications", "--seed": "seed", "--max-lost": "int",
                        "--devices-per-node": "posint"},
        "avail goodput": {**{k: v for k, v in COMMON_TRAIN.items() if k not in ("--moe-imbalance", "--framework")},
                          "--faults": "faults", "--policy": "policy", "--storage-bandwidth": "bandwidth",
                          "--method": "choice"},
        "avail profiles": {"--devices": "huge", "--devices-per-node": "posint"},
        "infer simulate": {**SERVE_OPTS, "--router": "choice"},
        "infer explain": {**SERVE_OPTS, "--top": "posint"},
        "infer dynamic": {**{k: v for k, v in SERVE_OPTS.items() if k not in ("--profile", "--what-if")},
                          "--switch-cost": "duration", "--interval": "duration"},
        "infer autoscale": {**{k: v for k, v in SERVE_OPTS.items() if k not in ("--profile", "--what-if")},
                            "--startup": "duration", "--interval": "duration", "--target": "float"},
        "infer search": {"--model": "model-file", "--hardware": "hardware-file", "--devices": "huge",
                         "--traffic": "traffic", "--slo": "slo", "--attainment": "float", "--objective": "choice",
                         "--price": "price", "--seed": "seed", "--top": "posint", "--baseline": "deployment",
                         "--mode": "choice", "--router": "choice", "--requests": "int", "--workers": "posint",
                         "--what-if": "what-if"},
        "calibrate training": {"--hardware": "hardware-file", "--framework": "stack"},
        "calibrate collectives": {"--hardware": "hardware-file", "--collective": "choice", "--ranks": "posint",
                                  "--ranks-per-node": "posint", "--domain-ranks": "posint"},
        "calibrate trace": {**{k: v for k, v in COMMON_TRAIN.items() if k not in ("--profile", "--what-if")},
                            "--rank": "int", "--steps": "posint"},
        "graph show": {"--batch-shape": "batch-shape"},
        "graph infer": {"--hardware": "hardware-file", "--devices": "huge", "--batch": "posint", "--plan": "plan",
                        "--framework": "stack", "--batch-shape": "batch-shape"},
    }
    return table.get(verb, {})


def generate(seed: int, count: int, root: Path) -> list[tuple[str, list[str]]]:
    """``count`` distinct malformed invocations, every verb represented, drawn with ``seed``."""
    rng = random.Random(seed)
    files = Files(root)
    pools = {verb: _mutations(verb, base, rng, files) for verb, base in BASES.items()}
    out: dict[str, tuple[str, list[str]]] = {}
    for pool in pools.values():  # every verb at least a few times
        for case in rng.sample(pool, min(3, len(pool))):
            out[" ".join(case[1])] = case
    everything = [case for pool in pools.values() for case in pool]
    rng.shuffle(everything)
    for case in everything:
        if len(out) >= count:
            break
        out.setdefault(" ".join(case[1]), case)
    cases = list(out.values())
    fill = {"@CSV": files.write(".csv", CSV_TEXT[1]), "@JSON": files.write(".json", RECORD_TEXT[2])}
    return [(name, [str(root / f"out{i}.yaml") if a == "@OUT" else fill.get(a, a) for a in argv])
            for i, (name, argv) in enumerate(cases)]
