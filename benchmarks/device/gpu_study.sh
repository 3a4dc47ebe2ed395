#!/bin/bash
# How the study's GPU runs of 2026-11-27 were made (docs/reproduction.md): many sweep folders at once on
# one GPU, stopped at a deadline, the finished runs' logs packed into $OUT. Usage, from the repository root:
#   DATA=path/to/cifar10-train.zip OUT=/tmp/gpu-study DEADLINE=425 JOBS=20 bash benchmarks/device/gpu_study.sh
# Lesson of that day: 20 processes on a 16-core host spent most of their time compiling side by side
# (90-180 s for a 17-token run); use JOBS <= 8 and let the first cell of each shape fill the compilation cache.
# 2026-11-28: PLAN="scaling:cpu" runs one sweep folder per cell of the named experiment:scale pairs instead
# (the cpu-scale scaling cells, largest first; JAX_COMPILATION_CACHE_DIR only moves the cache a sweep keeps anyway):
#   PLAN=scaling:cpu DEADLINE=540 JOBS=8 bash benchmarks/device/gpu_study.sh
# Each such folder starts as a copy of the experiment's committed runs (docs/run-logs/SCALE/EXPERIMENT), so only
# the seeds still missing run; merge the new runs back there from the folders $OUT/study.tar.gz holds, e.g.
#   reluattn sweep long-sequence --scale cpu --out docs/run-logs/cpu/long-sequence --merge STUDY/long-sequence-*/
# 2026-11-29: PLAN="long-sequence:cpu scaling-lr-grid:cpu" ran both, then again with DEADLINE=225 to resume the
# stopped runs. The device tool sends at most 64 MiB: the tracked files (most of them docs/run-logs) and the
# 49 MiB data zip in .gpu/ were more, so the run logs a PLAN does not read were deleted from the working tree for
# the call (`git checkout -- docs` after); a PLAN reads only docs/run-logs/SCALE/EXPERIMENT of its own pairs.
# 2026-11-29 (evening): a PLAN pair may name shards, EXPERIMENT:SCALE:N, for runs left in few cells (the 28 runs of
# long-sequence were in two cells, so one process a cell would have run 14 each, one after the other): N folders,
# each a `--shard K/N` of the experiment's runs, e.g. PLAN="long-sequence:cpu:7 scaling-lr-grid:cpu" JOBS=10.
# To go on after the deadline on a machine still warm, run the same command again: its folders are still in $R and
# each sweep resumes its stopped run from the checkpoint (a hand-written resume on 2026-11-29 gave the wrong --data
# and lost the device's last minutes; and a command line holding "reluattn sweep" is killed by the pkill below).
# The sweeps on one GPU, many cells at once, each group of cells a resumable sweep folder;
# stopped at a deadline, the finished runs' logs (no checkpoints) packed into $OUT.
DEADLINE=${DEADLINE:-430}; JOBS=${JOBS:-20}; PLAN=${PLAN:-}; SCALE_A=${SCALE_A:-cpu}; SCALE_S=${SCALE_S:-gpu}; EXTRA=${EXTRA:-}
export PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false RELUATTN_CACHE=/tmp/rcache PYTHONUNBUFFERED=1
export JAX_COMPILATION_CACHE_DIR=/tmp/xla JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
D=${DATA:-.gpu/cifar10-train.zip}; OUT=${OUT:-/tmp/gpu-study}; mkdir -p $OUT; R=${R:-/tmp/study}; mkdir -p $R; T0=$(date +%s)
nvidia-smi -L 2>/dev/null; lscpu | grep "Model name"; git log -1 --format=%H 2>/dev/null
rm -rf $R/warm-run  # a second command on the same machine (resuming the sweeps) warms the cache again
python3 -m reluattn train --preset cpu-small --data $D --steps 2 --warmup-steps 0 --out $R/warm-run --no-progress $EXTRA > $R/warm.log 2>&1 || { cat $R/warm.log; exit 1; }
echo "cache warm after $(( $(date +%s)-T0 )) s"
python3 - "$SCALE_A" "$SCALE_S" "$PLAN" > $R/jobs.txt <<'PY'
import sys
from pathlib import Path
from reluattn.study.experiments import cells_of, default_seeds
from reluattn.study.sweep_folder import plan_sweep
scale_a, scale_s, plan = sys.argv[1:4]
if plan:                                                 # one folder per cell (the largest first) or per shard
    for pair in plan.split():
        exp, scale, *shards = pair.split(":")
        for k in range(1, int(shards[0]) + 1) if shards else ():
            print(f"{exp} {scale} {exp}-shard{k}of{shards[0]} --shard {k}/{shards[0]}")
        committed = Path("docs/run-logs") / scale / exp  # a cell whose runs are all there needs no process
        for cell in () if shards else cells_of(exp, scale)[::-1]:
            if plan_sweep(committed, [cell], default_seeds(exp, scale))[2]:
                print(f"{exp} {scale} {exp}-{cell.name} --cells {cell.name}")
    sys.exit()
for cell in cells_of("scaling", scale_s)[::-1]:          # the largest first: they take longest
    print(f"scaling {scale_s} scaling-{cell.name} --cells {cell.name}")
cells = [c.name for c in cells_of("alpha-sweep", scale_a)]
groups = 12
for g in range(groups):
    print(f"alpha-sweep {scale_a} alpha-sweep-g{g:02d} --cells " + " ".join(cells[g::groups]))
PY
wc -l $R/jobs.txt
run_job() { set -- $1; exp=$1 scale=$2 folder=$3; shift 3
  # a folder starts from the committed runs of its experiment, so the sweep skips the seeds already done
  if [ -n "$PLAN" ] && [ ! -e $R/$folder ] && [ -f docs/run-logs/$scale/$exp/sweep.json ]; then cp -r docs/run-logs/$scale/$exp $R/$folder; fi
  python3 -m reluattn sweep $exp --scale $scale --data $D --out $R/$folder --no-progress "$@" > $R/$folder.log 2>&1; }
export -f run_job; export D R PLAN
xargs -P $JOBS -d '\n' -I{} bash -c 'run_job "$@"' _ {} < $R/jobs.txt &
XPID=$!
while kill -0 $XPID 2>/dev/null && [ $(( $(date +%s)-T0 )) -lt $DEADLINE ]; do sleep 5; done
if kill -0 $XPID 2>/dev/null; then echo "deadline: stopping the sweeps at $(( $(date +%s)-T0 )) s"
  kill -TERM $XPID; pkill -TERM -f "reluattn sweep"; for i in 1 2 3 4 5 6; do pgrep -f "reluattn (sweep|train|evaluate)" >/dev/null || break; sleep 2; done
  pkill -KILL -f "reluattn (sweep|train|evaluate)"; fi
wait 2>/dev/null
echo "done runs: $(grep -l '"status": "done"' $R/*/*/seed*/cell.json | wc -l) after $(( $(date +%s)-T0 )) s"
grep -h '"status": "failed"' -A3 $R/*/*/seed*/cell.json | head -20
tail -n 2 $R/*.log
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv 2>/dev/null
# Only the runs finished here that the committed folders do not hold already, with each folder's sweep.json (for
# `--merge`) and the sweeps' logs: the whole of $R (copies of the committed runs included) came to 20 MB on
# 2026-11-29, over the 16 MiB a file the device tool sends back, and did not come back (re-packed by hand).
REPO=$PWD; cd $R
for record in */*/seed*/cell.json; do grep -q '"status": "done"' $record || continue
  folder=${record%%/*}; run=${record#*/}; run=${run%/cell.json}
  exp=$(sed -n 's/.*"experiment": "\([^"]*\)".*/\1/p' $folder/sweep.json); scale=$(sed -n 's/.*"scale": "\([^"]*\)".*/\1/p' $folder/sweep.json)
  grep -qs '"status": "done"' $REPO/docs/run-logs/$scale/$exp/$run/cell.json || echo $folder/$run; done > new-runs.txt
echo "runs to send back: $(wc -l < new-runs.txt)"
tar czf $OUT/study.tar.gz --exclude=checkpoints --exclude='*.lock' -T new-runs.txt */sweep.json *.log new-runs.txt && ls -la $OUT
