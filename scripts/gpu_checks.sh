#!/usr/bin/env bash
# The accelerator checks in one run, each under its own time limit, every output kept under $OUT as it lands:
#   env.txt          the device and versions
#   gpu.json         `phasejax bench` (the record is rewritten after each figure): the solves, a gradient against
#                    its solve, a vmapped batch against a loop, the lines alone and the main job
#   paper.json       the paper's 40 x 20 x 2 diagram as one `phasejax phase-diagram` call, twice with one new
#                    persistent compilation cache: cold (compiles and stores), then warm (loads); seconds each
#   paper.tgz        that diagram's output folder (points.csv, thresholds.csv, figures)
#   counting.tgz     `phasejax counting --preset gpu` (never run on an accelerator yet; its run folder resumes
#                    elsewhere)
# Usage: OUT=folder bash scripts/gpu_checks.sh [bench_s paper_s counting_s]
set -u
OUT=${OUT:?set OUT to the folder for the outputs}
BENCH_S=${1:-200}; PAPER_S=${2:-120}; COUNTING_S=${3:-120}     # 560 s in all: one 10-minute device call
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
{ nvidia-smi -L; $PY -c "import jax, phasejax; print('jax', jax.__version__, jax.devices())"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== bench"
PHASEJAX_COMPILE_CACHE=0 timeout "$BENCH_S" $PY -m phasejax.cli bench --out "$OUT" --no-progress \
  --parts program cold_solve cached_solve warm_point gradient vmapped_batch lines main_job paper_diagram \
  > "$OUT/bench.log" 2>&1
echo "bench exit $?"; tail -3 "$OUT/bench.log"

echo "== the paper's diagram, one call, cold then with the cache warm"
P=$(mktemp -d); CACHE=$(mktemp -d)
paper() {   # $1: cold or warm
  local t0 rc
  t0=$EPOCHREALTIME
  JAX_COMPILATION_CACHE_DIR="$CACHE" timeout "$PAPER_S" $PY -m phasejax.cli phase-diagram --alpha-min 0.1 \
    --n-alpha 40 --omega-max 0.95 --n-omega 20 --out "$P/paper" --run-dir "$P/run_$1" --overwrite --no-progress \
    > "$OUT/paper_$1.log" 2>&1
  rc=$?
  echo "\"$1\": {\"seconds\": $($PY -c "print(round($EPOCHREALTIME - $t0, 2))"), \"exit\": $rc}"
}
{ echo "{"; paper cold; echo ","; paper warm; echo "}"; } > "$OUT/paper.json"
cat "$OUT/paper.json"; [ -d "$P/paper" ] && tar czf "$OUT/paper.tgz" -C "$P" paper

echo "== counting, the GPU preset"
C=$(mktemp -d)
timeout "$COUNTING_S" $PY -m phasejax.cli counting --preset gpu --out "$C/counting" --run-dir "$C/run" \
  --no-progress > "$OUT/counting.log" 2>&1
echo "counting exit $?"; tail -3 "$OUT/counting.log"; tar czf "$OUT/counting.tgz" -C "$C" .
exit 0
