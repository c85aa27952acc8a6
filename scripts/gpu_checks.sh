#!/usr/bin/env bash
# The accelerator checks in one run, each under its own time limit, every output kept under $OUT as it lands:
#   env.txt       the device and versions
#   gpu.json      `phasejax bench` (every figure; the record is rewritten after each one)
#   gamp.tgz      `phasejax gamp` at d = 1000, 2000, 10 seeds (the run folder, resumable elsewhere)
#   replicas.tgz  `phasejax replicas` at d = 8000 (merge with `phasejax replicas --replot --merge`)
# Usage: OUT=folder bash scripts/gpu_checks.sh [bench_s gamp_s replicas_s]
set -u
OUT=${OUT:?set OUT to the folder for the outputs}
BENCH_S=${1:-310}; GAMP_S=${2:-135}; REPLICAS_S=${3:-105}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PHASEJAX_COMPILE_CACHE=0
PY=${PYTHON:-python3}
{ nvidia-smi -L; $PY -c "import jax, phasejax; print('jax', jax.__version__, jax.devices())"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
echo "== bench"; timeout "$BENCH_S" $PY -m phasejax.cli bench --out "$OUT" --no-progress \
  --parts cold_solve warm_point main_job paper_diagram batch training > "$OUT/bench.log" 2>&1
echo "bench exit $?"; tail -3 "$OUT/bench.log"
echo "== gamp"; G=$(mktemp -d)/gamp; mkdir -p "$G"; cp results/gamp/se_reference.json "$G/"
timeout "$GAMP_S" $PY -m phasejax.cli gamp --ds 1000 2000 --seeds 10 --max-steps 200 --chunk-size 20 \
  --out "$G" --overwrite --no-progress > "$OUT/gamp.log" 2>&1
echo "gamp exit $?"; tail -3 "$OUT/gamp.log"; tar czf "$OUT/gamp.tgz" -C "$(dirname "$G")" gamp
echo "== replicas"; R=$(mktemp -d)/replicas
timeout "$REPLICAS_S" $PY -m phasejax.cli replicas --ds 8000 --seeds 8 --alphas 1.5 --lams 0.01 --long-steps 2000 \
  --chunk-size 16 --out "$R" --no-se --no-progress > "$OUT/replicas.log" 2>&1
echo "replicas exit $?"; tail -3 "$OUT/replicas.log"; [ -d "$R" ] && tar czf "$OUT/replicas.tgz" -C "$(dirname "$R")" replicas
exit 0
