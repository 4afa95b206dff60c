#!/usr/bin/env bash
# This tree's `soma bench` against an earlier build's, in paired rounds, by process CPU time
# (the "no speed lost" check of a refactor on a busy machine; see docs/performance.md).
#
#   bash bench/paired.sh --before /tmp/base/build-bench --workload mlp_infer --batch 1 \
#       --steps 5000 --rounds 30
#
# Each round runs both builds once, each as its own process with OMP_NUM_THREADS=1 and
# OMP_WAIT_POLICY=passive (so that neither re-executes itself, see src/startup/omp_defaults.cpp),
# the order flipping every round. Wall time on a shared machine mostly measures the other work on
# it, and single processes land in a fast or a slow "mode" for their whole life
# (docs/inference-latency.md): compare.sh's medians of a few processes swing by 5-30%. Per round
# the CPU-time figure of the two builds is compared; printed: medians, fastest, and the median of
# the per-round ratios as "now / before" (> 1: faster now, as compare.sh's --before table).
# Builds nothing: BUILD_DIR (default build-bench) and --before must hold a built apps/soma/soma.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-bench}
BEFORE= WORKLOAD=mlp_infer BATCH=1 STEPS= ROUNDS=20 THREADS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --before) BEFORE=$2; shift ;;
    --workload) WORKLOAD=$2; shift ;;
    --batch) BATCH=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "paired.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$PWD/$BUILD_DIR  # relative to the repository root, or absolute
NOW_SOMA=$BUILD_DIR/apps/soma/soma
BEFORE_SOMA=$BEFORE/apps/soma/soma
[[ -x $NOW_SOMA ]] || { echo "paired.sh: no $NOW_SOMA (build soma_cli in $BUILD_DIR)" >&2; exit 2; }
[[ -n $BEFORE && -x $BEFORE_SOMA ]] || { echo "paired.sh: --before: no $BEFORE_SOMA" >&2; exit 2; }

RAW=$(mktemp)
trap 'rm -f "$RAW"' EXIT
for ((i = 0; i < ROUNDS; ++i)); do
  if (( i % 2 )); then order="before now"; else order="now before"; fi
  for side in $order; do
    bin=$NOW_SOMA
    [[ $side == before ]] && bin=$BEFORE_SOMA
    out=$(OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=passive "$bin" bench --workload "$WORKLOAD" \
          --threads "$THREADS" --batch "$BATCH" ${STEPS:+--steps $STEPS} 2>&1) ||
      { echo "paired.sh: $side failed: $out" >&2; exit 1; }
    echo "$side $i $out" | tr '\n' ' ' >>"$RAW"
    echo >>"$RAW"
  done
done
echo "# bash bench/paired.sh --workload $WORKLOAD --batch $BATCH ${STEPS:+--steps $STEPS }--rounds $ROUNDS --threads $THREADS, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# ISA: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1);" \
  "$(grep -m1 -ow -E 'avx512f|avx512_bf16|avx512_vnni|amx_tile|avx2|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
python3 - "$RAW" <<'EOF'
import re, statistics as st, sys
runs = {}  # (side, round) -> {"bench": value, "cpu": value}
unit = None
for line in open(sys.argv[1]):
    side, rnd = line.split()[:2]
    for kind, v, u in re.findall(r"(bench|cpu) workload=\S+ threads=\d+ batch=\d+ value=(\S+) unit=(\S+)", line):
        runs.setdefault((side, int(rnd)), {})[kind] = float(v)
        unit = u
higher_better = unit in ("samples/s", "GFLOP/s")
rounds = sorted({r for s, r in runs if ("now", r) in runs and ("before", r) in runs})
print(f"| measure ({unit}) | now median | now fastest | before median | before fastest | now / before, median of {len(rounds)} per-round ratios |")
print("| --- | --- | --- | --- | --- | --- |")
for kind, name in (("cpu", "CPU time"), ("bench", "wall time")):
    now = [runs[("now", r)][kind] for r in rounds]
    bef = [runs[("before", r)][kind] for r in rounds]
    best = max if higher_better else min
    ratios = [n / b if higher_better else b / n for n, b in zip(now, bef)]
    print(f"| {name} | {st.median(now):.4g} | {best(now):.4g} | {st.median(bef):.4g} | {best(bef):.4g} | "
          f"{st.median(ratios):.3f} |")
EOF
