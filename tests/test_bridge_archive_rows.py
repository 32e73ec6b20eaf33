"""validation/bridge_archive_rows.py: the rule that turns the Megatron-Bridge archive's later tables into rows."""

from __future__ import annotations

import csv
from pathlib import Path

from conftest import validation_script

ROOT = Path(__file__).resolve().parents[1]
HEADER_FSDP = ("| System | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | "
               "Tokens / sec / GPU | Model TFLOP / sec / GPU |")
HEADER = ("| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | "
          "Tokens / sec / GPU | Model TFLOP / sec / GPU |")
PAGE = f"""
## 26.06.01 NeMo Container

### Pre-Training Performance

#### Model: GPT OSS 120B

{HEADER}
| DGX-GB300 | 64 | MXFP8 | 1280 | 4 | 4096 | 1 | 1 | 1 | n/a | 16 | 20288 | 661[^gpt-oss-note] |

#### Model: Kimi_K2

{HEADER}
| DGX-GB300 | 256 | MXFP8 | 4096 | 2 | 4096 | 1 | 4 | 1 | 4 | 64 | 5372 | 1099 |

## 26.04.01 NeMo Container

### Pre-Training Performance

#### Model: LLAMA3_70B

{HEADER_FSDP}
| DGX-GB200 | 64 | FP8 | 256 | 2 | 8192 | 64 | 1 | 1 | 1 | n/a | n/a | 4224 | 1892 |
| DGX-GB200 | 64 | NVFP4 | 256 | 1 | 8192 | 0 | 2 | 4 | 1 | 5 | n/a | 4864 | 2202 |

#### Model: LLAMA3.1_405B

{HEADER_FSDP}
| DGX-GB200 | 256 | MXFP8 | 1536 | 1 | 8192 | 0 | 4 | 16 | 1 | 8 | n/a | 800 | 1994 |

### SFT Performance

#### Model: LLAMA3_70B

{HEADER_FSDP}
| DGX-GB200 | 32 | FP8 | 32 | 1 | 4096 | 0 | 1 | 8 | 1 | 10 | n/a | 3864 | 1671 |

## 26.02 NeMo Container

### Pre-Training Performance

#### Model: LLAMA3_70B

{HEADER_FSDP}
| DGX-H100 | 64 | FP8 | 256 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 | n/a | 1621 | 728 |
"""


def _module():
    return validation_script("bridge_archive_rows")


def _existing() -> list[dict]:
    with (ROOT / "validation" / "extra_training_runs.csv").open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if int(row["id"][1:] if row["id"][0] == "X" else 0) < 80]


def test_rule_keeps_catalogued_pretraining_rows_of_the_later_releases():
    rows = _module().build(PAGE, _existing())
    # Kimi K2 (not catalogued), NVFP4, the SFT table and the 26.02 table (already in the file) are left out.
    assert [(r["model"], r["hardware"]) for r in rows] == [
        ("GPT OSS 120B", "gb300"), ("LLAMA3_70B", "gb200"), ("LLAMA3.1_405B", "gb200")]
    gpt, fsdp, deep = rows
    assert [r["id"] for r in rows] == ["X80", "X81", "X82"]
    # A table without the FSDP column; VP 'n/a' is 1; MXFP8 is the plan precision fp8; the footnote is kept out
    # of the figure and named in the notes.
    assert (gpt["ep"], gpt["vpp"], gpt["precision"], gpt["zero_stage"], gpt["moe_imbalance"]) == ("16", "1", "fp8", "", "1.0")
    assert "TFLOP/s/GPU 661 " in gpt["notes"] and "cudnn-frontend#256" in gpt["notes"]
    assert gpt["devices_per_node"] == "" and gpt["value"] == "20288" and gpt["release"] == "nemo-26.06.01"
    # FSDP > 0 is Megatron-FSDP, with the recipe's CPU offload carried from the 26.02 rows.
    assert (fsdp["zero_stage"], fsdp["plan_options"], fsdp["ep"]) == ("3", "offload_layers=40", "1")
    # 16 x 8 virtual stages for 126 layers: the embedding and the loss are a stage each.
    assert deep["plan_options"] == "layout=E|(t|)*126L,fp8_recipe=mx"  # MXFP8: validation/derive_fp8_recipe.py
    assert gpt["plan_options"] == "fp8_recipe=mx" and fsdp["plan_options"] == "offload_layers=40"  # FP8 is FP8-CS


def test_shape_columns_come_from_the_files_rows_of_the_model():
    rows = _module().build(PAGE, _existing())
    existing = {row["model"]: row for row in _existing()}
    for row in rows:
        for column in ("layers", "hidden", "moe_experts", "vocab", "arch"):
            assert row[column] == existing[row["model"]][column]
