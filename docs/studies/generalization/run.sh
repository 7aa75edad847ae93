#!/bin/bash
# The generalization study, resumable: run it again and it continues where it stopped.
# Every head on clean frames, then NAC's recipe with each augmentation, on the same grid.
set -e
cd "$(dirname "$0")/../../.."
OUT=${OUT:-runs/generalization}
SC="--scenario color --scenario color3 --scenario bar --scenario blob --scenario noise --scenario domain-randomize"
.venv/bin/nacdrive study --heads nac lstm gru cfc mha mha-rope --seeds 3 --episodes 50 $SC --workers ${WORKERS:-2} --out "$OUT"
.venv/bin/nacdrive study --heads nac --seeds 3 --episodes 50 $SC --variant base --variant jitter:augment=jitter \
  --variant randconv:augment=randconv --variant overlay:augment=overlay --workers ${WORKERS:-2} --out "$OUT"
