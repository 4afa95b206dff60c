#!/usr/bin/env bash
# Training tokens/s of examples/char_transformer against the same model in PyTorch
# (bench/char_transformer_torch.py), alternating the two RUNS times each so that both see the
# same load; prints every run and the medians. Both time training steps 2..STEPS (the first is a
# warm-up), without validation. Usage:
#   bench/char_transformer_compare.sh [build dir] [model flags, e.g. --layers 2 --context 64]
# Environment: RUNS (3), STEPS (10), THREADS (2), PYTHON (/usr/bin/python3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
shift || true
runs=${RUNS:-3} steps=${STEPS:-10} threads=${THREADS:-2} python=${PYTHON:-/usr/bin/python3}
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$threads
soma=() torch=()
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for ((r = 1; r <= runs; ++r)); do
  s=$("$build/examples/char_transformer/char_transformer" --epochs 1 --steps "$steps" \
        --generate 0 "$@" | sed -n 's/^training steps .*: \([0-9]*\) tokens\/s.*/\1/p')
  t=$("$python" "$here/char_transformer_torch.py" --steps "$((steps - 1))" --generate 0 \
        --threads "$threads" "$@" | sed -n 's/^train: .* \([0-9]*\) tokens\/s.*/\1/p')
  soma+=("$s") torch+=("$t")
  echo "run $r: soma $s tokens/s, PyTorch $t tokens/s (load $(cut -d' ' -f1-3 /proc/loadavg))"
done
echo "median: soma $(median "${soma[@]}") tokens/s, PyTorch $(median "${torch[@]}") tokens/s"
