#!/usr/bin/env bash
# The seed's drug-screening example: a new molecular model (MPNN message passing + SE(3)-Transformer-like
# equivariant attention blocks, shipped as onnx:molecule-mpnn) rehearsed on 64 Ascend 910B before it is
# trained. A sample is one batched molecular graph of 2048 atoms and 16384 edges (~110 QM9 molecules).
set -euo pipefail
WT=${WT:-windtunnel}
$WT graph show onnx:molecule-mpnn --batch-shape nodes=2048,edges=16384
$WT train simulate --model onnx:molecule-mpnn --hardware ascend-910b --devices 64 \
    --batch-shape nodes=2048,edges=16384 --global-batch 4096 --plan dp=64,mbs=4
$WT train search --model onnx:molecule-mpnn --hardware ascend-910b --devices 64 \
    --batch-shape nodes=2048,edges=16384 --global-batch 4096 --top 5
