#!/bin/bash
# The probe of 2026-11-27 on one H200 (docs/performance.md, "gpu-fast: not built"): does the package run
# on the GPU, and how fast are candidate models? Usage, from the repository root:
#   DATA=path/to/cifar10-train.zip OUT=/tmp/gpu-probe bash benchmarks/device/gpu_probe.sh
# Call A: does the package run on this GPU, and how fast are the candidate configs?
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false RELUATTN_CACHE=/tmp/rcache PYTHONUNBUFFERED=1
export JAX_COMPILATION_CACHE_DIR=/tmp/xla JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
D=${DATA:-.gpu/cifar10-train.zip}; OUT=${OUT:-/tmp/gpu-probe}; mkdir -p $OUT
nvidia-smi -L; nproc; lscpu | grep "Model name"
python3 -c "import jax, optax, numpy; print('jax', jax.__version__, 'optax', optax.__version__, 'numpy', numpy.__version__, jax.devices())"
t0=$(date +%s)
python3 -m reluattn train --preset cpu-small --data $D --steps 2 --out /tmp/warm --no-progress > $OUT/warm.log 2>&1; echo "warm rc=$? $(( $(date +%s)-t0 )) s"; tail -3 $OUT/warm.log
S="--preset cpu-small --no-progress --val-split 5000 --test-split 5000 --warmup-epochs 0.5 --batch-size 128 --dim 64 --depth 4 --heads 2 --mlp-dim 128 --compute-dtype bfloat16 --label-smoothing 0.1 --lr 0.004 --patch-size 4 --attention relu --alpha 1"
# one cpu-scale 65-token cell alone, 1 epoch (312 steps)
t0=$(date +%s); python3 -m reluattn train $S --epochs 1 --seed 0 --data $D --out /tmp/one > $OUT/one.log 2>&1; echo "one rc=$? $(( $(date +%s)-t0 )) s"; grep "img/s" $OUT/one.log | tail -2
# 12 of them at once, 1 epoch each
t0=$(date +%s)
for i in $(seq 1 12); do python3 -m reluattn train $S --epochs 1 --seed $i --data $D --out /tmp/par$i > /tmp/par$i.log 2>&1 & done; wait
echo "par12 $(( $(date +%s)-t0 )) s"; tail -2 /tmp/par1.log
# gpu-fast candidates: 300 steps each, batch 512
G="--preset cpu-fast --token-keep 1 --no-progress --val-split 5000 --test-split 5000 --steps 300 --warmup-steps 20 --batch-size 512 --compute-dtype bfloat16 --eval-every 100000 --checkpoint-every 100000 --pool gap --patch-size 4"
for shape in "256 6 4 512" "192 12 3 768" "384 8 6 1152" "192 8 3 384"; do set -- $shape
  t0=$(date +%s); python3 -m reluattn train $G --dim $1 --depth $2 --heads $3 --mlp-dim $4 --data $D --out /tmp/g$1x$2 > $OUT/g$1x$2.log 2>&1
  echo "shape $shape rc=$? $(( $(date +%s)-t0 )) s"; grep "img/s" $OUT/g$1x$2.log | tail -2; grep -o "\"flops_per_image\": [0-9]*" /tmp/g$1x$2/summary.json; done
nvidia-smi --query-gpu=name,memory.used --format=csv
