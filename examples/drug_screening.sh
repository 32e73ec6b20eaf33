#!/usr/bin/env bash
# The seed's drug-screening example: a new molecular model (MPNN message passing + SE(3)-Transformer-like
# equivariant attention blocks, shipped as onnx:molecule-mpnn) rehearsed on 64 Ascend 910B before it is
# trained, then served forward only to screen a candidate library. A sample is one batched molecular graph of
# 2048 atoms and 16384 edges (~110 QM9 molecules).
set -euo pipefail
WT=${WT:-windtunnel}
$WT graph show onnx:molecule-mpnn --batch-shape nodes=2048,edges=16384
$WT train simulate --model onnx:molecule-mpnn --hardware ascend-910b --devices 64 \
    --batch-shape nodes=2048,edges=16384 --global-batch 4096 --plan dp=64,mbs=4
$WT train search --model onnx:molecule-mpnn --hardware ascend-910b --devices 64 \
    --batch-shape nodes=2048,edges=16384 --global-batch 4096 --top 5
# Screening: forward-only serving of the same DAG on the 64 devices, at 1000 samples/s (~110,000 molecules/s).
$WT infer simulate --model onnx:molecule-mpnn --hardware ascend-910b --deployment replicas=64 --batch 4 \
    --batch-shape nodes=2048,edges=16384 --traffic poisson:rate=1000 --slo latency=500ms
