#!/usr/bin/env bash
# Distributed-training benchmark (docs/distributed.md).
#
# bench/bench_dist.sh [BUILD_DIR]   (the default, CPU ranks over MPI):
#   1. samples/s of data-parallel MLP training at 1 and 2 ranks (1 thread per rank), the median
#      of REPEATS runs each;
#   2. the same training in a hand-written loop with the gradient reducer's overlap on and off;
#   3. all-reduce time and bandwidth per message size through soma's communicator, beside the
#      same measurement with raw MPI_Allreduce (bench_dist_allreduce_mpi, the reference: Debian
#      packages neither the OSU nor the Intel MPI benchmarks).
#
# bench/bench_dist.sh [BUILD_DIR] --device cuda [--gpus N] [--dry-run]   (one rank per GPU):
#   1. samples/s of data-parallel training of the CIFAR-shaped CNN (global batch BATCH, default
#      512) at 1, 2, ..., N GPUs (N: --gpus, else every GPU nvidia-smi lists), median of REPEATS,
#      with the speedup over one GPU;
#   2. all-reduce of device buffers through soma's NCCL communicator at N ranks, beside NCCL's
#      own figure for the same sizes: nccl-tests' all_reduce_perf (in-place columns) when it is on
#      PATH or at $ALL_REDUCE_PERF, else bench_nccl_allreduce (a raw ncclAllReduce loop). Bus
#      bandwidth as nccl-tests compute it: algbw * 2 (N - 1) / N (0 with one GPU: compare times).
#   --dry-run runs the same steps, parsing and tables on CPU ranks (training on the CPU, soma's
#   MPI communicator vs raw MPI as the reference; all_reduce_perf still used when on PATH), with
#   small sizes: for machines without a GPU (tests/cli/bench_dist_test.sh).
# Build with -DSOMA_BUILD_BENCH=ON (MPI found; NCCL for the GPU run).
set -euo pipefail
build=build
device=cpu
gpus=
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=${2:?--device needs cpu or cuda}; shift 2 ;;
    --gpus) gpus=${2:?--gpus needs a number}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench_dist.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
case "$device" in cpu|cuda) ;; *) echo "bench_dist.sh: --device must be cpu or cuda, got '$device'" >&2; exit 2 ;; esac
repeats=${REPEATS:-3}
batch=${BATCH:-256}
steps=${STEPS:-40}
for t in bench_dist_train bench_dist_allreduce bench_dist_allreduce_mpi; do
  [ -x "$build/bench/$t" ] || { echo "missing $build/bench/$t: ninja -C $build $t" >&2; exit 1; }
done
mpirun=(mpirun --oversubscribe -x OMP_NUM_THREADS=1)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# size_bytes=... avg_us=... busbw_GBps=... lines -> "bytes avg_us busbw", sorted by size.
fields() { grep '^size' | sed 's/=/ /g' | awk '{ print $2, $6, $10 }' | sort -k1,1; }
# nccl-tests' all_reduce_perf table -> the same three columns (in-place time and busbw).
nccl_tests_fields() {
  awk '$1 ~ /^[0-9]+$/ && NF >= 12 { print $1, $10, $12 }' | sort -k1,1
}

if [ "$device" = cuda ]; then
  if [ "$dry_run" = 1 ]; then
    gpus=${gpus:-2}
    train_device=cpu
    batch=${BATCH:-32}
    steps=${STEPS:-3}
    repeats=${REPEATS:-1}
    max_bytes=${MAX_BYTES:-$((1 << 16))}
    echo "# dry run: CPU ranks stand in for GPUs ($gpus), MPI for NCCL; the figures are not GPU figures"
  else
    if [ -z "$gpus" ]; then
      gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    fi
    if [ "${gpus:-0}" -lt 1 ]; then
      echo "bench_dist.sh: --device cuda: no GPU (nvidia-smi lists none); --dry-run tries the script without one" >&2
      exit 3
    fi
    train_device=cuda
    batch=${BATCH:-512}
    steps=${STEPS:-40}
    max_bytes=${MAX_BYTES:-$((1 << 28))}
  fi
  echo "== data-parallel CNN training (CIFAR-shaped: 2 x Conv2D + MaxPool2D, Dense; global batch $batch, $steps steps), 1..$gpus ranks on $train_device"
  declare -A rate
  for ((np = 1; np <= gpus; np++)); do
    runs=()
    for ((i = 0; i < repeats; i++)); do
      line=$(BENCH_MODEL=cnn BENCH_DEVICE=$train_device "${mpirun[@]}" -x BENCH_MODEL -x BENCH_DEVICE \
               -np "$np" "$build/bench/bench_dist_train" "$batch" "$steps" | grep -E '^(bench_dist_train|# skipped)')
      echo "  $line"
      case "$line" in "# skipped"*) echo "bench_dist.sh: training skipped: ${line#\# skipped: }" >&2; exit 1 ;; esac
      runs+=("$(sed 's/.*samples_per_s=//' <<<"$line")")
    done
    rate[$np]=$(printf '%s\n' "${runs[@]}" | median)
  done
  printf '%6s %14s %9s %11s\n' ranks samples/s speedup efficiency
  for ((np = 1; np <= gpus; np++)); do
    awk -v n="$np" -v r="${rate[$np]}" -v one="${rate[1]}" \
      'BEGIN { printf "%6d %14.1f %8.2fx %10.0f%%\n", n, r, r / one, 100 * r / one / n }'
  done

  echo "== all-reduce, $gpus ranks, device buffers: soma's communicator vs the reference (in place, f32 sum)"
  if [ "$dry_run" = 1 ]; then
    soma_out=$("${mpirun[@]}" -np "$gpus" "$build/bench/bench_dist_allreduce" "$max_bytes" | fields)
  else
    soma_raw=$("${mpirun[@]}" -np "$gpus" "$build/bench/bench_dist_allreduce" "$max_bytes" nccl)
    grep -q '^# nccl: skipped' <<<"$soma_raw" && { echo "bench_dist.sh: $(grep '^# nccl' <<<"$soma_raw")" >&2; exit 1; }
    soma_out=$(fields <<<"$soma_raw")
  fi
  perf=${ALL_REDUCE_PERF:-$(command -v all_reduce_perf || true)}
  if [ -n "$perf" ] && [ -x "$perf" ]; then
    ref_name="nccl-tests all_reduce_perf ($perf, in-place columns)"
    # One process driving every GPU (-g): works for nccl-tests built with or without MPI.
    ref_out=$("$perf" -b 4 -e "$max_bytes" -f 4 -g "$gpus" -w 5 -n 50 | nccl_tests_fields)
  elif [ "$dry_run" = 1 ]; then
    ref_name="raw MPI_Allreduce (bench_dist_allreduce_mpi; dry run)"
    ref_out=$("${mpirun[@]}" -np "$gpus" "$build/bench/bench_dist_allreduce_mpi" "$max_bytes" | fields)
  else
    [ -x "$build/bench/bench_nccl_allreduce" ] ||
      { echo "missing $build/bench/bench_nccl_allreduce (and no all_reduce_perf): ninja -C $build bench_nccl_allreduce" >&2; exit 1; }
    ref_name="raw ncclAllReduce loop (bench_nccl_allreduce)"
    ref_out=$("${mpirun[@]}" -np "$gpus" "$build/bench/bench_nccl_allreduce" "$max_bytes" | fields)
  fi
  echo "reference: $ref_name"
  printf '%12s %11s %11s %12s %12s %9s\n' bytes soma_us ref_us soma_busbw ref_busbw ref/soma
  join <(echo "$soma_out") <(echo "$ref_out") | sort -g |
    awk '{ printf "%12d %11.2f %11.2f %12.3f %12.3f %9.2f\n", $1, $2, $4, $3, $5, $4 / $2 }'
  echo "(busbw in GB/s, as nccl-tests; ref/soma = reference time / soma time: 1.00 means soma adds nothing)"
  exit 0
fi

echo "== data-parallel MLP training (784-512-512-10, global batch $batch, $steps steps, 1 thread/rank)"
declare -A rate
for np in 1 2; do
  runs=()
  for ((i = 0; i < repeats; i++)); do
    line=$("${mpirun[@]}" -np "$np" "$build/bench/bench_dist_train" "$batch" "$steps" | grep '^bench_dist_train')
    echo "  $line"
    runs+=("$(sed 's/.*samples_per_s=//' <<<"$line")")
  done
  rate[$np]=$(printf '%s\n' "${runs[@]}" | median)
  echo "ranks=$np median samples_per_s=${rate[$np]}"
done
awk -v a="${rate[1]}" -v b="${rate[2]}" 'BEGIN { printf "speedup 2 ranks / 1 rank: %.2fx\n", b / a }'

echo "== 2 ranks, hand-written loop: gradient buckets (256 KiB) overlapped with the backward pass or not"
"${mpirun[@]}" -np 2 "$build/bench/bench_dist_train" "$batch" "$steps" 262144 loop | sed 's/^/  /'

echo "== all-reduce, 2 ranks: soma communicator (blocking, and async as the gradient buckets use it) vs raw MPI_Allreduce"
fields() { grep '^size' | sed 's/=/ /g' | awk '{ print $2, $6 }' | sort -k1,1; }  # bytes avg_us
soma_out=$("${mpirun[@]}" -np 2 "$build/bench/bench_dist_allreduce" | fields)
async_out=$("${mpirun[@]}" -np 2 "$build/bench/bench_dist_allreduce" $((1 << 26)) async | fields)
mpi_out=$("${mpirun[@]}" -np 2 "$build/bench/bench_dist_allreduce_mpi" | fields)
printf '%10s %10s %10s %10s %9s %9s %9s %11s\n' bytes soma_us async_us mpi_us soma_GB/s async_GB/s mpi_GB/s mpi/soma
join <(join <(echo "$soma_out") <(echo "$async_out")) <(echo "$mpi_out") | sort -g |
  awk '{ printf "%10d %10.2f %10.2f %10.2f %9.3f %9.3f %9.3f %11.2f\n", $1, $2, $3, $4, $1 / $2 / 1e3, $1 / $3 / 1e3, $1 / $4 / 1e3, $4 / $2 }'
echo "(GB/s = algorithm bandwidth, bytes / time; mpi/soma = raw MPI time / soma blocking time, 1.00: soma adds nothing)"

# GPUs (docs/distributed.md, "NCCL"): the same measurement on device buffers through NCCL, one
# rank per GPU (GPUS, default 2; NCCL refuses two ranks on one GPU). Skipped, with the reason,
# without NCCL in the build or without a GPU.
gpus=${GPUS:-2}
echo "== all-reduce, $gpus ranks, NCCL on device buffers (busbw = algbw * 2 (n - 1) / n, as nccl-tests)"
"${mpirun[@]}" -np "$gpus" "$build/bench/bench_dist_allreduce" $((1 << 28)) nccl | sed 's/^/  /'
