#!/usr/bin/env bash
# The GPU run that trains the DFlash drafter by self-distillation against the frozen, shipped
# target (tools/train/dflash_distill.py; docs/models.md). Expects the pack made by
# tools/train/dflash_pack.py in build-dflash-pack (carried: `carry: ["build-dflash-pack"]`) and
# $OUT for the results: distill_log.txt, distill_results.json, dflash/{config.json,model.safetensors}.
set -o pipefail
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"
python3 tools/train/dflash_distill.py --pack build-dflash-pack --gguf models/onebit-20m-q8_0.gguf \
  --out "$OUT" --train-seconds "${TRAIN_SECONDS:-300}" --deadline "${DEADLINE:-400}" "$@" 2>&1 | tail -c 20000
ls -la "$OUT" "$OUT/dflash"
