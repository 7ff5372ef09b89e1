#!/bin/bash
# Makes a long real torchrun job (4 ranks, gloo, CPU torch) whose rank 2's checkpoint folder is
# a tiny tmpfs: torch.save fails with the kernel's own ENOSPC near the end of the run, the other
# ranks lose their peer in the barrier. Usage: make.sh OUT_DIR [STEPS] (needs root for the mount;
# VENV: a venv with torch, default /opt/venvs/torch).
set -eu
OUT=$1; STEPS=${2:-6000}
VENV=${VENV:-/opt/venvs/torch}
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$OUT"; mkdir -p "$OUT/checkpoints/rank2"
cp "$HERE/train_long.py" "$OUT/"
cd "$OUT"
# each checkpoint is ~30 KB: the tmpfs holds a few saves, then ENOSPC
mount -t tmpfs -o size=440k tmpfs checkpoints/rank2
trap 'umount "$OUT/checkpoints/rank2" 2>/dev/null || true' EXIT
"$VENV/bin/torchrun" --standalone --nproc-per-node 4 --log-dir logs --tee 3 \
    train_long.py --steps "$STEPS" --save-every $((STEPS / 8)) > console.log 2>&1 || true
