#!/usr/bin/env bash
# Install phasejax with the *declared minimum* versions of its dependencies into a fresh virtual environment
# and run a smoke test there (imports, every subcommand's --help, the validation table, a tiny run of each sweep).
#
#   bash scripts/check_floors.sh                  # floors read from pyproject.toml (">=X" becomes "==X")
#   FLOORS="jax==0.6.1 jaxlib==0.6.1" bash scripts/check_floors.sh   # try other pins (added after pyproject's)
#   KEEP=1 bash scripts/check_floors.sh           # keep the environment (printed) for inspection
#
# Needs network access to PyPI and python3 >= 3.11. Exit status 0 means the floors resolve and work.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
WORK=$(mktemp -d -t phasejax-floors-XXXXXX)
cleanup() { if [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; else echo "kept $WORK"; fi; }
trap cleanup EXIT

# ">=X" floors of [project].dependencies (and the test extra) as "==X" pins
PINS=$("$PY" - "$ROOT/pyproject.toml" <<'PYEOF'
import re, sys, tomllib
with open(sys.argv[1], "rb") as fh:
    project = tomllib.load(fh)["project"]
reqs = list(project["dependencies"]) + list(project.get("optional-dependencies", {}).get("test", []))
pins = []
for req in reqs:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", req)
    if m:
        pins.append(f"{m.group(1)}=={m.group(3)}")
print(" ".join(pins))
PYEOF
)
PINS="$PINS ${FLOORS:-}"
echo "floors: $PINS"
# later pins of a package replace earlier ones
PINS=$(echo "$PINS" | tr ' ' '\n' | awk -F'==' 'NF==2 {v[$1]=$2; if (!($1 in seen)) {order[++n]=$1; seen[$1]=1}} END {for (i=1;i<=n;i++) printf "%s==%s ", order[i], v[order[i]]}')
echo "installing: $PINS"

"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q --upgrade pip
printf '%s\n' $PINS > "$WORK/constraints.txt"
"$VPY" -m pip install -q -c "$WORK/constraints.txt" "$ROOT[test]" $PINS
"$VPY" -m pip list 2>/dev/null | grep -iE "^(jax|jaxlib|flax|optax|chex|numpy|scipy|matplotlib|tqdm|pytest) " | tee "$WORK/versions.txt"

cd "$WORK"   # import the installed package, not the checkout
"$VPY" - <<'PYEOF'
import jax, jax.numpy as jnp, numpy as np
import phasejax
from phasejax.cli import command_modules, main
before = bool(jax.config.jax_enable_x64)
for name in command_modules():
    try:
        main([name, "--help"])
    except SystemExit as e:
        assert e.code == 0, (name, e.code)
from phasejax.theory import make_params, linear_baseline_error
from phasejax.empirics import TrainingGrid, train_students
from phasejax.sweep import RunOptions
from phasejax.tasks.counting import CountingGrid, counting_sweep
from phasejax.tasks.histogram import HistogramTask
p = make_params(1.0, 0.3)
assert linear_baseline_error(p).dtype == jnp.float64
quiet = RunOptions(progress=False)
for dt in (jnp.float32, jnp.float64):
    runs = train_students(TrainingGrid(alphas=(1.0,), omegas=(0.3,), seeds=(0,), d=10), p, quadrature_order=3,
                          dtype=dt, options=quiet).runs
    assert runs["converged"].all(), runs
out = counting_sweep(CountingGrid(ds=(2,), ps=(2,), seeds=(0,)), HistogramTask(4, 3), "dot+BOS+softmax", steps=3,
                     batch_size=4, n_test=16, options=quiet)
assert np.isfinite(out.runs["accuracy"]).all()
assert bool(jax.config.jax_enable_x64) == before
print("smoke test passed with jax", jax.__version__)
PYEOF
"$VPY" -m pytest -q -p no:cacheprovider "$ROOT/tests/test_validation.py" "$ROOT/tests/test_precision.py" \
    --rootdir "$ROOT" -c "$ROOT/pyproject.toml"
echo "floors OK: $(tr '\n' ' ' < "$WORK/versions.txt")"
