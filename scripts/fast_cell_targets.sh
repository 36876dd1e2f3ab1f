#!/usr/bin/env bash
# The speed targets of issue #29 (reports/benchmarks.md, "Work shared across cells, and the targets again"):
# each command alone, one after another, on a quiet machine. Run it from a clean checkout with its .venv:
#   scripts/fast_cell_targets.sh /path/to/data /tmp/t29 > targets.txt
# Each line: name, wall seconds and peak RSS (/usr/bin/time %e and %M). Then the per-attack-family cells
# (scripts/attack_family_cells.toml through `rapt-audit benchmark run`; read each cell's env.wall_time_s).
set -u
DATA=${1:?the data directory (sst2/, trustpilot/, conll2003/, wikitext2/)}
WORK=${2:-/tmp/t29}
T="/usr/bin/time -f %e_s_%M_KB"
RUN=".venv/bin/rapt-audit run --quiet"
mkdir -p "$WORK"
unset RAPT_AUDIT_DATA
for i in 1 2 3; do  # smoke t2t, synthetic corpus, an empty cache each time
  export RAPT_AUDIT_CACHE=$WORK/smoke-cache-$i; rm -rf "$RAPT_AUDIT_CACHE" "$WORK/smoke-$i"
  echo "smoke-empty-$i $($T $RUN --defense t2t --attacks all --profile smoke --out $WORK/smoke-$i/a 2>&1 | tail -1)"
done
export RAPT_AUDIT_CACHE=$WORK/smoke-cache-1
for i in 1 2 3; do
  echo "smoke-warm-$i $($T $RUN --defense t2t --attacks all --profile smoke --out $WORK/smoke-1/w$i 2>&1 | tail -1)"
done
for i in 0 1 2 3; do  # 0 warms the cache for RAPT
  echo "main-warm-$i $($T $RUN --defense rapt --attacks all --out $WORK/main-$i 2>&1 | tail -1)"
done
export RAPT_AUDIT_DATA=$DATA RAPT_AUDIT_CACHE=$WORK/cpu-cache
CELL="$RUN --defense rapt --profile cpu --dataset sst2 --attacks all"
echo "cpu-warmup $($T $CELL --set eta=100 --out $WORK/cpu-100 2>&1 | tail -1)"
for e in 90 95 105; do
  echo "cpu-new-$e $($T $CELL --set eta=$e --out $WORK/cpu-$e 2>&1 | tail -1)"
  echo "cpu-again-$e $($T $CELL --set eta=$e --out $WORK/cpu-$e --force 2>&1 | tail -1)"
done
echo "families $($T .venv/bin/rapt-audit benchmark run scripts/attack_family_cells.toml --out $WORK/families --quiet 2>&1 | tail -1)"
