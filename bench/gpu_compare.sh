#!/usr/bin/env bash
# soma against PyTorch eager (and cuBLAS called directly) on the same GPU in the same run
# (issue 23): each row runs soma, PyTorch and (GEMMs) the cuBLAS program in turn, --reps times,
# alternated, and reports the medians and the ratio to the issue's target in one table.
#
#   bench/gpu_compare.sh [--device cuda|cuda:N|cpu] [--reps N] [--soma PATH] [--python PATH]
#                        [--out DIR] [--dry-run]
#
#   --device cpu   the same rows at toy sizes on the CPU, one thread: checks the script end to
#                  end on a machine without a GPU (a minute); not a measurement
#   --reps N       alternations per row (default 3; medians of N)
#   --soma PATH    the soma CLI (default: apps/soma/soma under build-gpu-check, build-gpu, build)
#   --python PATH  the interpreter with torch (default python3, then /usr/bin/python3); without
#                  torch the PyTorch column says "n/a (no torch)" and the rest still runs
#   --dry-run      print the commands of every row and exit
#
# Rows (precision tf32 = f32 storage with TF32 products on both sides; bf16 = autocast on both
# sides, f32 master weights):
#   mlp_train b128, b1024 (784-128-128-10, Adam)   target soma >= 1.5x / 1.2x PyTorch
#   mlp_train b128 --cuda-graph (fit replays a CUDA graph)  the same target
#   cifar_cnn_train b128 tf32, bf16                target soma >= PyTorch; bf16 >= 1.6x tf32
#   sgemm 4096 tf32, bf16_gemm 4096                target soma >= 0.95 x cuBLAS
# Exit status: 0 every soma run gave a number (targets are reported, not enforced); 1 a soma run
# failed; 2 a usage mistake; 3 --device cuda without a usable GPU for soma.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEVICE=cuda
REPS=3
SOMA=
PYTHON=
OUT=
DRY=0
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"

usage() { sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --device) [ $# -ge 2 ] || { echo "gpu_compare: --device needs a value" >&2; exit 2; }; DEVICE=$2; shift ;;
    --reps) [ $# -ge 2 ] || { echo "gpu_compare: --reps needs a number" >&2; exit 2; }; REPS=$2; shift ;;
    --soma) [ $# -ge 2 ] || { echo "gpu_compare: --soma needs a path" >&2; exit 2; }; SOMA=$2; shift ;;
    --python) [ $# -ge 2 ] || { echo "gpu_compare: --python needs a path" >&2; exit 2; }; PYTHON=$2; shift ;;
    --out) [ $# -ge 2 ] || { echo "gpu_compare: --out needs a directory" >&2; exit 2; }; OUT=$2; shift ;;
    --dry-run) DRY=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_compare: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $REPS in ''|*[!0-9]*|0) echo "gpu_compare: --reps must be a positive integer" >&2; exit 2 ;; esac
case $DEVICE in cpu|cuda|cuda:[0-9]*) ;; *) echo "gpu_compare: --device must be cpu, cuda or cuda:N" >&2; exit 2 ;; esac

if [ -z "$SOMA" ]; then
  for d in build-gpu-check build-gpu build; do
    [ -x "$ROOT/$d/apps/soma/soma" ] && { SOMA="$ROOT/$d/apps/soma/soma"; break; }
  done
fi
[ -n "$SOMA" ] && [ -x "$SOMA" ] || { echo "gpu_compare: no soma CLI found (build the soma_cli target, or --soma PATH)" >&2; [ "$DRY" = 1 ] || exit 2; }
OUT=${OUT:-${TMPDIR:-/tmp}/gpu_compare.$$}
mkdir -p "$OUT" || exit 2

# torch: the first interpreter that imports it.
TORCH=
for py in ${PYTHON:-python3 /usr/bin/python3}; do
  if command -v "$py" >/dev/null && timeout 60 "$py" -c "import torch" >/dev/null 2>&1; then TORCH=$py; break; fi
done

# Sizes: the issue's on a GPU; toys on the CPU (a check of the script, not a measurement).
if [ "$DEVICE" = cpu ]; then
  MLP_STEPS=4 CNN_BATCH=8 CNN_STEPS=2 GEMM_N=256 THREADS=(--threads 1)
else
  MLP_STEPS=300 CNN_BATCH=128 CNN_STEPS=30 GEMM_N=4096 THREADS=()
fi

# cuBLAS direct (bench/cublas_gemm.cpp), built here against the toolkit: GPU runs only.
CUBLAS=
if [ "$DEVICE" != cpu ] && [ "$DRY" = 0 ]; then
  if command -v g++ >/dev/null && [ -f "$CUDA_HOME/include/cublas_v2.h" ]; then
    g++ -O2 -std=c++17 -I"$CUDA_HOME/include" "$ROOT/bench/cublas_gemm.cpp" -L"$CUDA_HOME/lib64" \
      -lcublas -lcudart -Wl,-rpath,"$CUDA_HOME/lib64" -o "$OUT/cublas_gemm" >"$OUT/cublas_build.log" 2>&1 &&
      CUBLAS="$OUT/cublas_gemm"
  fi
fi

# Rows: name | workload | batch | steps | precision | target ("torch:1.5" = soma/torch >= 1.5,
# "cublas:0.95" = soma/cuBLAS >= 0.95) | extra soma flags (optional: --cuda-graph replays fit's
# step as a CUDA graph)
ROWS=(
  "mlp b128 tf32|mlp_train|128|$MLP_STEPS|tf32|torch:1.5"
  "mlp b128 tf32 graph|mlp_train|128|$MLP_STEPS|tf32|torch:1.5|--cuda-graph"
  "mlp b1024 tf32|mlp_train|1024|$MLP_STEPS|tf32|torch:1.2"
  "cnn b$CNN_BATCH tf32|cifar_cnn_train|$CNN_BATCH|$CNN_STEPS|tf32|torch:1.0"
  "cnn b$CNN_BATCH bf16|cifar_cnn_train|$CNN_BATCH|$CNN_STEPS|bf16|torch:1.0"
  "sgemm $GEMM_N tf32|sgemm|$GEMM_N|3|tf32|cublas:0.95"
  "bf16 gemm $GEMM_N|bf16_gemm|$GEMM_N|3|bf16|cublas:0.95"
)

value_of() { sed -n 's/.*value=\([0-9.e+-]*\).*/\1/p' "$1" | tail -n1; }
median() { printf '%s\n' "$@" | grep -v '^$' | sort -g | awk '{v[NR]=$1} END { if (NR == 0) print ""; else if (NR % 2) print v[(NR+1)/2]; else printf "%.6g\n", (v[NR/2]+v[NR/2+1])/2 }'; }

soma_cmd() { echo "$SOMA" bench --workload "$1" --batch "$2" --steps "$3" --precision "$4" --device "$DEVICE" "${THREADS[@]}" $5; }
torch_cmd() { echo "$TORCH" "$ROOT/bench/torch_bench.py" --workload "$1" --batch "$2" --steps "$3" --precision "$4" --device "$DEVICE" "${THREADS[@]}"; }

if [ "$DRY" = 1 ]; then
  for r in "${ROWS[@]}"; do
    IFS='|' read -r name w b s p target extra <<<"$r"
    echo "$name:"
    echo "  soma:  $(soma_cmd "$w" "$b" "$s" "$p" "$extra")"
    echo "  torch: $(torch_cmd "$w" "$b" "$s" "$p")${TORCH:+}$([ -z "$TORCH" ] && echo '   (no torch here)')"
    case $target in cublas:*) echo "  cublas: cublas_gemm $b $p $s" ;; esac
  done
  exit 0
fi

FAILED=0
declare -A SOMA_MED TORCH_MED
TABLE=()
for r in "${ROWS[@]}"; do
  IFS='|' read -r name w b s p target extra <<<"$r"
  sv=() tv=() cv=()
  tag=$w.$b.$p${extra:+.graph}
  for rep in $(seq 1 "$REPS"); do
    log="$OUT/$tag.$rep"
    # Alternated: soma, torch, cuBLAS, then again.
    $(soma_cmd "$w" "$b" "$s" "$p" "$extra") >"$log.soma" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "gpu_compare: soma failed ($rc) on '$name': $(tail -n 2 "$log.soma" | tr '\n' ' ')" >&2
      if grep -q 'CUDA is not available\|built without CUDA' "$log.soma"; then exit 3; fi
      FAILED=1
    fi
    sv+=("$(value_of "$log.soma")")
    if [ -n "$TORCH" ]; then
      $(torch_cmd "$w" "$b" "$s" "$p") >"$log.torch" 2>&1 || echo "gpu_compare: torch failed on '$name': $(tail -n 1 "$log.torch")" >&2
      tv+=("$(value_of "$log.torch")")
    fi
    if [ -n "$CUBLAS" ] && [ "${target%%:*}" = cublas ]; then
      "$CUBLAS" "$b" "$p" "$s" >"$log.cublas" 2>&1 || echo "gpu_compare: cublas_gemm failed on '$name'" >&2
      cv+=("$(value_of "$log.cublas")")
    fi
  done
  sm=$(median "${sv[@]}"); tm=$(median "${tv[@]+"${tv[@]}"}"); cm=$(median "${cv[@]+"${cv[@]}"}")
  SOMA_MED[$name]=$sm
  ref_kind=${target%%:*} want=${target#*:}
  ref=$([ "$ref_kind" = cublas ] && echo "$cm" || echo "$tm")
  verdict=$(awk -v s="$sm" -v r="$ref" -v w="$want" 'BEGIN {
    if (s == "" || r == "" || r + 0 == 0) { print "-|n/a"; exit }
    q = s / r; printf "%.2f|%s\n", q, (q >= w ? "MET" : "MISSED") }')
  unit=$(sed -n 's/.*unit=\([^ ]*\).*/\1/p' "$OUT/$tag.1.soma" | tail -n1)
  TABLE+=("$name|${sm:-FAIL}|${tm:-n/a}|${cm:-n/a}|$unit|${verdict%%|*}|>= $want x $ref_kind|${verdict#*|}")
done

# bf16 against tf32 on the CNN (soma alone): the issue asks for >= 1.6x.
cnn_t=${SOMA_MED["cnn b$CNN_BATCH tf32"]:-} cnn_b=${SOMA_MED["cnn b$CNN_BATCH bf16"]:-}
bf=$(awk -v b="$cnn_b" -v t="$cnn_t" 'BEGIN { if (b == "" || t == "" || t + 0 == 0) print "-|n/a"; else { q = b / t; printf "%.2f|%s\n", q, (q >= 1.6 ? "MET" : "MISSED") } }')
TABLE+=("cnn bf16 / tf32 (soma)|${cnn_b:-FAIL}|-|-|ratio|${bf%%|*}|>= 1.6 x soma tf32|${bf#*|}")

{
  echo
  echo "gpu_compare ($(date -u '+%Y-%m-%d %H:%M UTC'), device $DEVICE, medians of $REPS alternated runs; torch: ${TORCH:-none}; cuBLAS direct: ${CUBLAS:+built}${CUBLAS:-n/a}):"
  [ "$DEVICE" = cpu ] && echo "(--device cpu: toy sizes, one thread: a check of the script, not a measurement)"
  printf '| %-22s | %12s | %12s | %12s | %-9s | %6s | %-20s | %-6s |\n' row soma torch cuBLAS unit ratio target verdict
  printf '| %-22s | %12s | %12s | %12s | %-9s | %6s | %-20s | %-6s |\n' --- --- --- --- --- --- --- ---
  for t in "${TABLE[@]}"; do
    IFS='|' read -r a b c d e f g h <<<"$t"
    printf '| %-22s | %12s | %12s | %12s | %-9s | %6s | %-20s | %-6s |\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h"
  done
} | tee "$OUT/summary.txt"
exit $FAILED
