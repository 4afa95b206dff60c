#!/usr/bin/env bash
# Distributed-training benchmark (docs/distributed.md):
#   1. samples/s of data-parallel MLP training at 1 and 2 ranks (1 thread per rank), the median
#      of REPEATS runs each;
#   2. the same training in a hand-written loop with the gradient reducer's overlap on and off;
#   3. all-reduce time and bandwidth per message size through soma's communicator, beside the
#      same measurement with raw MPI_Allreduce (bench_dist_allreduce_mpi, the reference: Debian
#      packages neither the OSU nor the Intel MPI benchmarks).
# usage: bench/bench_dist.sh [BUILD_DIR] (configured with -DSOMA_BUILD_BENCH=ON and MPI found)
set -euo pipefail
build=${1:-build}
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
fields() { grep '^size' | sed 's/=/ /g' | awk '{ print $2, $6 }' | sort -k1,1; }
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
