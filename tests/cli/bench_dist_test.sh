#!/usr/bin/env bash
# bench/bench_dist.sh --device cuda without a GPU (issue 24): the dry run goes through every step
# on CPU ranks; with a stand-in all_reduce_perf (nccl-tests' table format) its in-place columns
# are the reference; without a GPU the real run stops with exit status 3.
# usage: bench_dist_test.sh BENCH_DIST_SH BUILD_DIR
set -uo pipefail
script=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- output"; cat "$tmp/out"; exit 1; }

# A fake all_reduce_perf: the rows nccl-tests prints (size count type redop root, out-of-place
# time algbw busbw #wrong, in-place time algbw busbw #wrong), 10 us and 1.5 GB/s in place.
cat >"$tmp/all_reduce_perf" <<'FAKE'
#!/usr/bin/env bash
max=4; while [ $# -gt 0 ]; do [ "$1" = -e ] && max=$2; shift; done
echo "# nThread 1 nGpus 2 minBytes 4 maxBytes $max step: 4(factor) warmup iters: 5 iters: 50"
echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
for ((s = 4; s <= max; s *= 4)); do
  printf "%12d %12d %8s %6s %6d %8.2f %6.2f %6.2f %6d %8.2f %6.2f %6.2f %6d\n" $s $((s / 4)) float sum -1 20.00 0.50 0.50 0 10.00 1.50 1.50 0
done
echo "# Avg bus bandwidth    : 1.5"
FAKE
chmod +x "$tmp/all_reduce_perf"

export REPEATS=1 STEPS=2 BATCH=16 MAX_BYTES=4096
ALL_REDUCE_PERF="$tmp/all_reduce_perf" bash "$script" "$build" --device cuda --gpus 2 --dry-run >"$tmp/out" 2>&1 ||
  fail "the dry run failed"
grep -q '^# dry run' "$tmp/out" || fail "no dry-run note"
for n in 1 2; do
  grep -Eq "^ +$n +[0-9.]+ +[0-9.]+x +[0-9]+%$" "$tmp/out" || fail "no samples/s row for $n ranks"
done
grep -q '^reference: nccl-tests all_reduce_perf' "$tmp/out" || fail "all_reduce_perf was not the reference"
rows=$(grep -Ec '^ +[0-9]+ +[0-9.]+ +10\.00 +[0-9.]+ +1\.500 +[0-9.]+$' "$tmp/out")
[ "$rows" -eq 6 ] || fail "expected 6 sizes (4 B .. 4 KiB) with the in-place 10 us / 1.5 GB/s, got $rows"

# Without all_reduce_perf, the dry run's reference is raw MPI.
PATH=/usr/bin:/bin bash "$script" "$build" --device cuda --gpus 2 --dry-run >"$tmp/out" 2>&1 ||
  fail "the dry run without all_reduce_perf failed"
grep -q '^reference: raw MPI_Allreduce' "$tmp/out" || fail "expected the raw MPI reference"

# A real GPU run on a machine without one: exit 3, said in one line.
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  bash "$script" "$build" --device cuda >"$tmp/out" 2>&1
  rc=$?
  [ "$rc" -eq 3 ] || fail "exit status $rc without a GPU, expected 3"
  grep -q 'no GPU' "$tmp/out" || fail "the reason is not said"
fi
bash "$script" "$build" --device tpu >"$tmp/out" 2>&1
[ $? -eq 2 ] || fail "a bad --device is not a usage error"
echo "ok"
