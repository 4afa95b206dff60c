#!/usr/bin/env bash
# ResNet-18 inference, batch 64, f32 / TF32 / bf16: soma (an imported ONNX model on the GPU,
# build/bench/bench_infer) beside PyTorch eager on the same GPU (bench/torch_infer.py), with
# issue 24's targets: soma within 10% of PyTorch, soma bf16 >= 1.5x soma f32.
#
# usage: bench/gpu_infer_compare.sh [BUILD_DIR] [--dry-run]
#   BUILD_DIR  a build with bench_infer (-DSOMA_BUILD_BENCH=ON), default build
#   --dry-run  no GPU needed: the same steps on the CPU, batch 2, 64x64 images, f32 and bf16
# Environment: PYTHON (default /usr/bin/python3, with torch and torchvision), BATCH, ITERS,
# WARMUP, PRECISIONS ("f32 tf32 bf16").
# The model: torchvision's ResNet-18 exported to ONNX by torch_infer.py (random weights) and
# imported by soma, so both run the same graph; without torch/torchvision, soma's own ResNet-18
# (same layout) and the PyTorch column says skipped. Exit status: 0 (ran; targets are reported,
# not enforced), 1 a run failed, 2 usage, 3 no GPU for a real run.
set -euo pipefail
build=build
dry_run=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_infer_compare.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) build=$arg ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-/usr/bin/python3}
bench="$build/bench/bench_infer"
[ -x "$bench" ] || { echo "missing $bench: ninja -C $build bench_infer" >&2; exit 1; }
if [ "$dry_run" = 1 ]; then
  device=cpu image=${IMAGE:-64} batch=${BATCH:-2} iters=${ITERS:-2} warmup=${WARMUP:-1}
  precisions=${PRECISIONS:-f32 bf16}
  echo "# dry run on the CPU (batch $batch, ${image}x$image): not GPU figures"
else
  if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "gpu_infer_compare.sh: no GPU (nvidia-smi lists none); --dry-run tries the script without one" >&2
    exit 3
  fi
  device=cuda image=224 batch=${BATCH:-64} iters=${ITERS:-30} warmup=${WARMUP:-5}
  precisions=${PRECISIONS:-f32 tf32 bf16}
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | sed 's/^/# GPU: /'
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

model=resnet18
if "$python" "$here/torch_infer.py" --export "$tmp/resnet18.onnx" --image "$image" >"$tmp/export.log" 2>&1; then
  model="$tmp/resnet18.onnx"
  echo "# model: torchvision ResNet-18 exported to ONNX (random weights), imported by soma"
else
  echo "# model: soma's own ResNet-18 via ONNX (torchvision's export unavailable: $(tail -n 1 "$tmp/export.log"))"
fi

field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p"; }
declare -A soma_rate torch_rate
for p in $precisions; do
  line=$("$bench" --model "$model" --device "$device" --batch "$batch" --precision "$p" \
           --iters "$iters" --warmup "$warmup" --image "$image")
  echo "  $line"
  case "$line" in "# skipped"*) echo "gpu_infer_compare.sh: $line" >&2; exit 1 ;; esac
  soma_rate[$p]=$(field images_per_s <<<"$line")
  set +e
  tline=$("$python" "$here/torch_infer.py" --device "$device" --batch "$batch" --precision "$p" \
            --iters "$iters" --warmup "$warmup" --image "$image" 2>"$tmp/torch.err")
  rc=$?
  set -e
  if [ "$rc" = 0 ]; then
    echo "  $tline"
    torch_rate[$p]=$(field images_per_s <<<"$tline")
  elif [ "$rc" = 77 ]; then
    echo "  torch: ${tline:-skipped}"
  else
    echo "gpu_infer_compare.sh: torch_infer.py failed ($rc): $(tail -n 3 "$tmp/torch.err")" >&2
    exit 1
  fi
done

echo "== ResNet-18 inference, batch $batch, ${image}x$image, $device (images/s)"
printf '%-10s %12s %12s %11s %8s\n' precision soma torch soma/torch target
for p in $precisions; do
  s=${soma_rate[$p]}
  t=${torch_rate[$p]:-}
  if [ -n "$t" ]; then
    awk -v p="$p" -v s="$s" -v t="$t" 'BEGIN { r = s / t; printf "%-10s %12.1f %12.1f %11.2f %8s\n", p, s, t, r, (r >= 0.9 ? "ok" : "MISSED") }'
  else
    awk -v p="$p" -v s="$s" 'BEGIN { printf "%-10s %12.1f %12s %11s %8s\n", p, s, "skipped", "-", "-" }'
  fi
done
echo "(target: soma >= 0.90 x PyTorch eager at every precision)"
if [ -n "${soma_rate[bf16]:-}" ] && [ -n "${soma_rate[f32]:-}" ]; then
  awk -v b="${soma_rate[bf16]}" -v f="${soma_rate[f32]}" \
    'BEGIN { r = b / f; printf "soma bf16 / f32: %.2fx (target >= 1.5x: %s)\n", r, (r >= 1.5 ? "ok" : "MISSED") }'
  if [ -n "${torch_rate[bf16]:-}" ] && [ -n "${torch_rate[f32]:-}" ]; then
    awk -v b="${torch_rate[bf16]}" -v f="${torch_rate[f32]}" 'BEGIN { printf "torch bf16 / f32: %.2fx\n", b / f }'
  fi
fi
