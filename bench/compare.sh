#!/usr/bin/env bash
# soma against libtorch, side by side in one run (issue 5).
#
#   bash bench/compare.sh            # quick run: 1 repetition, short runs
#   bash bench/compare.sh --full     # 5 repetitions, full epochs, compile-time workload too
#   bash bench/compare.sh --reps 3 --threads 1,2 --workloads mlp_train,sgemm
#   bash bench/compare.sh --reps 3 --compile-time   # quick runs, 3 repetitions, workload 10 too
#   bash bench/compare.sh --table-only              # print the table again from the last raw.txt
#   bash bench/compare.sh --reps 7 --threads 1 --before /tmp/base/build-bench
#       # also runs the `soma` of another build (an earlier revision) alternated with this one
#       # and prints "now / before" per workload (the "no speed lost" check of a refactor)
#   bash bench/compare.sh --reps 7 --threads 1 --before /tmp/base/build-bench --no-peers
#       # the same without libtorch: neither installs nor builds the peer programs
#   bash bench/compare.sh --no-pypi     # Debian's libtorch only (no PyPI download, ~540 MB)
#   BUILD_DIR=build bash bench/compare.sh --smoke
#       # CI's check that the script works end to end (.ci/run): every workload once, a few steps
#       # each, 1 thread, Debian's libtorch only; fails (exit 1) when a peer program does not
#       # build, a run fails or a row misses a figure, never on timing
#
# Builds soma's `soma` program (BUILD_DIR, default build-bench, Release) and the peer programs in
# bench/libtorch (libtorch twins, OpenBLAS/oneDNN called directly; libtorch is optional and is
# installed with apt-get when missing and running as root). Two libtorch peers: Debian's
# libtorch-dev, and the libtorch inside PyPI's torch wheel of the version scripts/oracles.lock
# pins (pip install --no-deps into $BUILD_DIR/pypi-torch, the twins built again against it in
# $BUILD_DIR/peers-pypi; skipped, and said so, where it cannot be installed or its libraries
# cannot load; SOMA_PYPI_TORCH=torch==X.Y.Z tries another). Every (workload, threads, batch) runs as its own process, soma and the
# libtorchs alternately (the order flips every repetition), with OMP_NUM_THREADS set to the
# thread count on every side. Prints one markdown table: medians over the repetitions, the spread
# as (max-min)/median, and "speedup" = how many times better soma is than each libtorch
# (throughput soma/torch; latency, time and memory torch/soma), next to the issue's target.
# Raw lines go to $BUILD_DIR/compare/raw.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build-bench}
MODE=quick
REPS=
COMPILE_TIME=0
TABLE_ONLY=0
BEFORE=
PEERS_ON=1
PYPI_ON=1
STRICT=0   # --strict/--smoke: exit 1 when a peer does not build, a run fails or a figure is missing
THREADS=1,2
WORKLOADS=mlp_train,lenet_train,cifar_cnn_train,mlp_infer,cnn_infer,op_overhead,op_overhead_tape,sgemm
while [[ $# -gt 0 ]]; do
  case "$1" in
    --full) MODE=full; COMPILE_TIME=1 ;;
    --compile-time) COMPILE_TIME=1 ;;
    --table-only) TABLE_ONLY=1 ;;
    --quick) MODE=quick ;;
    --reps) REPS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --workloads) WORKLOADS=$2; shift ;;
    --before) BEFORE=$2; shift ;;
    --no-peers) PEERS_ON=0 ;;
    --no-pypi) PYPI_ON=0 ;;
    --smoke) MODE=smoke; STRICT=1; PYPI_ON=0; THREADS=1; REPS=1 ;;
    --strict) STRICT=1 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -z $REPS ]] && { [[ $MODE == full ]] && REPS=5 || REPS=1; }
# BUILD_DIR relative to the repository root or absolute (an absolute one was once put under ROOT)
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
# PyPI's libtorch: the torch of scripts/oracles.lock unless SOMA_PYPI_TORCH names another
PYPI_TORCH=${SOMA_PYPI_TORCH:-$(bash scripts/oracles.sh --pin torch)}

log() { echo "compare.sh: $*" >&2; }

OUT=$BUILD_DIR/compare
mkdir -p "$OUT"
RAW=$OUT/raw.txt
measure() {
# ---- build -------------------------------------------------------------------------------------
FAILED=()  # what went wrong, for --strict
: >"$OUT/labels.txt"
if [[ $PEERS_ON == 1 && ! -f /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake ]] \
   && command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  log "installing libtorch-dev and libdnnl-dev (the peer side only)"
  # A fresh machine may have no package lists yet: update once and try again.
  apt-get install -y -q libtorch-dev libdnnl-dev >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1; apt-get install -y -q libtorch-dev libdnnl-dev >/dev/null; } ||
    log "could not install libtorch-dev"
fi
log "building soma in $BUILD_DIR"
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then  # an existing build directory keeps its options
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSOMA_BUILD_TESTS=OFF \
    -DSOMA_BUILD_EXAMPLES=OFF -DSOMA_BUILD_BENCH=OFF >/dev/null
fi
mkdir -p "$BUILD_DIR"
cmake --build "$BUILD_DIR" --target soma_cli >"$BUILD_DIR/compare-build.log" 2>&1 ||
  { tail -20 "$BUILD_DIR/compare-build.log" >&2; exit 1; }
SOMA=$BUILD_DIR/apps/soma/soma
PEERS=$BUILD_DIR/peers
PEERS_PYPI=$BUILD_DIR/peers-pypi
PYPI_DIR=$BUILD_DIR/pypi-torch
# A peer side that cannot be configured or built leaves its columns empty; soma's side (and
# --before) still run. (oneDNN is found by its header and library: Debian's dnnl-config.cmake asks
# for OpenCL's headers, which stopped this configure on machines without ocl-icd-opencl-dev.)
PEERS_BUILT=1
if [[ $PEERS_ON == 0 ]]; then
  log "--no-peers: no libtorch column"
elif log "building the peer programs in $PEERS (libtorch: about a minute per file)"
   cmake -S bench/libtorch -B "$PEERS" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$BUILD_DIR/compare-peers.log" 2>&1 &&
   cmake --build "$PEERS" >>"$BUILD_DIR/compare-peers.log" 2>&1; then :; else
  log "the peer programs did not build (see $BUILD_DIR/compare-peers.log):"
  grep -m3 -E "Error|error" "$BUILD_DIR/compare-peers.log" >&2 || true
  FAILED+=("peer build (Debian libtorch)")
  PEERS_BUILT=0  # no stale programs from an earlier build
fi
TORCH=$PEERS/bench_torch
[[ $PEERS_ON == 0 || $PEERS_BUILT == 0 ]] && TORCH=
if [[ -n $TORCH && ! -x $TORCH ]]; then
  log "libtorch not available: the libtorch column stays empty"; TORCH=
  FAILED+=("Debian's libtorch peer not available (libtorch-dev)")
fi
[[ -n $TORCH ]] && echo "label torch libtorch $(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null |
  sed -E 's/^([0-9]+\.[0-9]+).*/\1/') (Debian)" >"$OUT/labels.txt"

# The second peer: libtorch as PyPI's torch wheel ships it (headers, libtorch_cpu, c10). The
# default wheel is the CUDA build; --no-deps leaves out its CUDA wheels (GBs): the CPU twins load
# only libtorch_cpu and c10, which still link the CUDA runtime (libcudart, libcupti) of the
# wheel's CUDA major version, found here in the CUDA toolkit; where they are missing the peer is
# skipped. The install is kept (BUILD_DIR/pypi-torch) and reused until removed.
PYPI=
if [[ $PEERS_ON == 1 && $PYPI_ON == 1 ]]; then
  # (another version left there by an earlier pin is replaced)
  if [[ ! -f $PYPI_DIR/torch/lib/libtorch_cpu.so ]] || { [[ $PYPI_TORCH == torch==* ]] &&
     ! grep -q "^__version__ = '${PYPI_TORCH#torch==}[+']" "$PYPI_DIR/torch/version.py" 2>/dev/null; }; then
    log "installing $PYPI_TORCH from PyPI into $PYPI_DIR (the wheel only, ~540 MB)"
    rm -rf "$PYPI_DIR"
    timeout 900 python3 -m pip install --quiet --no-deps --target "$PYPI_DIR" "$PYPI_TORCH" \
      >"$BUILD_DIR/compare-pypi.log" 2>&1 || { log "could not install torch from PyPI (see $BUILD_DIR/compare-pypi.log)"; rm -rf "$PYPI_DIR"; }
  fi
  if [[ -f $PYPI_DIR/torch/lib/libtorch_cpu.so ]]; then
    missing=$(ldd "$PYPI_DIR/torch/lib/libtorch_cpu.so" | awk '/not found/ {print $1}' | tr '\n' ' ')
    if [[ -n $missing ]]; then
      log "PyPI's libtorch needs ${missing}(not found): no PyPI libtorch column"
    elif log "building the peer programs against PyPI's libtorch in $PEERS_PYPI"
       cmake -S bench/libtorch -B "$PEERS_PYPI" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DPEERS_TORCH_ROOT="$PYPI_DIR/torch" >"$BUILD_DIR/compare-peers-pypi.log" 2>&1 &&
       cmake --build "$PEERS_PYPI" >>"$BUILD_DIR/compare-peers-pypi.log" 2>&1; then
      PYPI=$PEERS_PYPI/bench_torch
      echo "label pypi libtorch $(sed -n -E "s/^__version__ = '([0-9]+\.[0-9]+).*/\1/p" \
        "$PYPI_DIR/torch/version.py") (PyPI)" >>"$OUT/labels.txt"
    else
      log "the PyPI peer programs did not build (see $BUILD_DIR/compare-peers-pypi.log):"
      grep -m3 -E "Error|error" "$BUILD_DIR/compare-peers-pypi.log" >&2 || true
      FAILED+=("peer build (PyPI libtorch)")
    fi
  fi
fi
BEFORE_SOMA=
if [[ -n $BEFORE ]]; then
  BEFORE_SOMA=$BEFORE/apps/soma/soma
  [[ -f $BEFORE/CMakeCache.txt ]] && cmake --build "$BEFORE" --target soma_cli >/dev/null 2>&1
  [[ -x $BEFORE_SOMA ]] || { log "--before: no $BEFORE_SOMA"; exit 2; }
fi

: >"$RAW"

# ---- runs --------------------------------------------------------------------------------------
# Steps per run: quick mode times fewer steps (same per-step work).
steps_for() {
  local w=$1 b=$2
  if [[ $MODE == full ]]; then echo; return; fi
  if [[ $MODE == smoke ]]; then  # proves each program runs; the figures mean nothing
    case $w in
      mlp_train) echo 10 ;;
      lenet_train|cifar_cnn_train) echo 1 ;;
      mlp_infer|cnn_infer) echo 2 ;;
      op_overhead|op_overhead_tape) echo 1000 ;;
      *) echo 1 ;;
    esac
    return
  fi
  case $w in
    mlp_train) echo $((12000 / b)) ;;
    lenet_train) echo 20 ;;
    cifar_cnn_train) echo 10 ;;
    mlp_infer) [[ $b == 1 ]] && echo 1000 || echo 100 ;;
    cnn_infer) [[ $b == 1 ]] && echo 100 || echo 5 ;;
    op_overhead|op_overhead_tape) echo 100000 ;;
    *) echo ;;
  esac
}
batches_for() {
  if [[ $MODE == smoke ]]; then
    case $1 in
      mlp_train) echo 32 ;;
      lenet_train|cifar_cnn_train) echo 64 ;;
      mlp_infer|cnn_infer) echo 1 ;;
      sgemm) echo 256 ;;
      *) echo 1 ;;
    esac
    return
  fi
  case $1 in
    mlp_train) echo "32 128" ;;
    lenet_train|cifar_cnn_train) echo 64 ;;
    mlp_infer|cnn_infer) echo "1 256" ;;
    sgemm) echo "256 512 1024 2048" ;;
    *) echo 1 ;;
  esac
}

# One process; appends "side bench workload=... value=..." and "side rss workload=... kib=..."
run_one() {
  local side=$1 w=$2 t=$3 b=$4 s=$5 bin
  case $side in
    soma) bin=("$SOMA" bench) ;;
    before) bin=("$BEFORE_SOMA" bench) ;;
    pypi) bin=("$PYPI") ;;
    *) bin=("$TORCH") ;;
  esac
  local tmp=$OUT/run.out
  # /usr/bin/time (Debian package `time`) gives the peak RSS; without it that row stays empty.
  local timer=()
  [[ -x /usr/bin/time ]] && timer=(/usr/bin/time -f "maxrss_kib=%M" -o "$OUT/time.out")
  : >"$OUT/time.out"
  if ! OMP_NUM_THREADS=$t "${timer[@]}" \
      "${bin[@]}" --workload "$w" --threads "$t" --batch "$b" ${s:+--steps $s} >"$tmp" 2>"$OUT/err.out"; then
    log "$side $w threads=$t batch=$b failed:"; tail -3 "$OUT/err.out" >&2
    FAILED+=("run: $side $w threads=$t batch=$b"); return 0
  fi
  sed "s/^/$side /" "$tmp" >>"$RAW"
  grep '^cpu ' "$OUT/err.out" | sed "s/^/$side /" >>"$RAW" || true
  local rss
  rss=$(sed -n 's/maxrss_kib=//p' "$OUT/time.out")
  [[ -n $rss ]] && echo "$side rss workload=$w threads=$t batch=$b value=$rss unit=KiB" >>"$RAW"
  return 0
}

IFS=, read -ra WL <<<"$WORKLOADS"
IFS=, read -ra TH <<<"$THREADS"
for ((r = 1; r <= REPS; ++r)); do
  log "repetition $r/$REPS"
  for w in "${WL[@]}"; do
    for t in "${TH[@]}"; do
      for b in $(batches_for "$w"); do
        s=$(steps_for "$w" "$b")
        if (( r % 2 )); then order="soma before torch pypi"; else order="pypi torch before soma"; fi
        for side in $order; do
          [[ $side == torch && -z $TORCH ]] && continue
          [[ $side == pypi && -z $PYPI ]] && continue
          [[ $side == before && -z $BEFORE_SOMA ]] && continue
          run_one "$side" "$w" "$t" "$b" "$s"
        done
      done
    done
    if [[ $w == sgemm && $PEERS_ON == 1 && $PEERS_BUILT == 1 && -x $PEERS/bench_gemm_peers ]]; then
      OMP_NUM_THREADS=${TH[-1]} "$PEERS/bench_gemm_peers" --threads "$THREADS" \
        --batch "$(batches_for sgemm | tr ' ' ,)" | sed 's/^/peer /' >>"$RAW"
    fi
  done
done

# Workloads 9 and 10: whole-process start-up of a program that includes the whole API and runs
# one op; compile time of that file (libtorch's takes 40-55 s: full mode only).
startup() {  # median wall time in ms of 11 runs
  local times=()
  for i in $(seq 11); do
    local t0=$(date +%s%N); "$@" >/dev/null || return 1; local t1=$(date +%s%N)
    times+=($(( (t1 - t0) / 1000 )))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n 6p | awk '{printf "%.1f", $1 / 1000}'
}
startup_row() {  # side program
  local v
  if v=$(startup "$2"); then
    echo "$1 bench workload=startup threads=1 batch=1 value=$v unit=ms" >>"$RAW"
  else
    log "$1: $2 failed"; FAILED+=("run: $1 startup")
  fi
}
CXX=${CXX:-g++}
SOMA_INC=$ROOT/include
SOMA_LIB=$BUILD_DIR
t0=$(date +%s%N)
$CXX -std=c++20 -O2 -I"$SOMA_INC" bench/libtorch/startup_soma.cpp -o "$OUT/startup_soma" \
  -L"$SOMA_LIB" -lsoma -Wl,-rpath,"$SOMA_LIB"
t1=$(date +%s%N)
echo "soma bench workload=compile_time threads=1 batch=1 value=$(( (t1 - t0) / 1000000 )) unit=ms" >>"$RAW"
startup_row soma "$OUT/startup_soma"
if [[ -n $TORCH ]]; then
  startup_row torch "$PEERS/startup_torch"
  if [[ $COMPILE_TIME == 1 ]]; then
    TORCH_INC="-I/usr/include -I/usr/include/torch/csrc/api/include"
    t0=$(date +%s%N)
    if $CXX -std=c++17 -O2 $TORCH_INC -c bench/libtorch/startup_torch.cpp -o "$OUT/startup_torch.o"; then
      t1=$(date +%s%N)
      echo "torch bench workload=compile_time threads=1 batch=1 value=$(( (t1 - t0) / 1000000 )) unit=ms" >>"$RAW"
    fi
  fi
fi
if [[ -n $PYPI ]]; then
  startup_row pypi "$PEERS_PYPI/startup_torch"
  if [[ $COMPILE_TIME == 1 ]]; then
    t0=$(date +%s%N)
    if $CXX -std=c++20 -O2 -I"$PYPI_DIR/torch/include" -I"$PYPI_DIR/torch/include/torch/csrc/api/include" \
        -c bench/libtorch/startup_torch.cpp -o "$OUT/startup_torch_pypi.o"; then
      t1=$(date +%s%N)
      echo "pypi bench workload=compile_time threads=1 batch=1 value=$(( (t1 - t0) / 1000000 )) unit=ms" >>"$RAW"
    fi
  fi
fi
if (( ${#FAILED[@]} )); then printf '%s\n' "${FAILED[@]}" >"$OUT/failed.txt"; else : >"$OUT/failed.txt"; fi

}
[[ $TABLE_ONLY == 1 ]] || measure

# ---- table -------------------------------------------------------------------------------------
[[ $TABLE_ONLY == 1 ]] || echo "# bash bench/compare.sh $MODE, $REPS repetition(s), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
# The CPU and its vector ISA extensions (soma builds with -march=native: figures from machines with
# different ISAs do not compare).
[[ $TABLE_ONLY == 1 ]] || echo "# ISA: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1);" \
  "$(grep -m1 -ow -E 'avx512f|avx512_bf16|avx512_vnni|amx_tile|avx2|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
rm -f "$RAW.missing"
python3 - "$RAW" "$OUT/labels.txt" <<'EOF'
import re, statistics, sys
from collections import defaultdict

vals = defaultdict(list)  # (side, kind, workload, threads, batch) -> values
units = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) (bench|rss|cpu) workload=(\S+) threads=(\d+) batch=(\d+) value=(\S+) unit=(\S+)", line)
    if not m:
        continue
    side, kind, w, t, b, v, u = m.groups()
    key = (kind, w, int(t), int(b))
    vals[(side,) + key].append(float(v))
    units[key] = u

def med(xs): return statistics.median(xs) if xs else None
def spread(xs): return (max(xs) - min(xs)) / statistics.median(xs) * 100 if len(xs) > 1 else 0.0
def fmt(v): return "-" if v is None else (f"{v:.3g}" if v < 100 else f"{v:,.0f}")

higher_better = {"samples/s", "GFLOP/s"}
targets = {"mlp_train/32": 1.5, "mlp_train/128": 1.2, "lenet_train": 1.2, "cifar_cnn_train": 1.2,
           "mlp_infer/1": 2.0, "cnn_infer/1": 2.0, "op_overhead": 3.0, "op_overhead_tape": 3.0,
           "rss mlp_train": 1.0, "rss lenet_train": 1.0, "startup": 10.0, "compile_time": 5.0}
def target(kind, w, b):
    if kind == "rss":
        return targets.get(f"rss {w}")
    return targets.get(f"{w}/{b}", targets.get(w))

# The peers: Debian's libtorch ("torch") and PyPI's ("pypi"), each with its own columns.
labels = {}
try:
    for line in open(sys.argv[2]):
        if line.startswith("label "):
            _, side, text = line.rstrip("\n").split(" ", 2)
            labels[side] = text
except OSError:
    pass
peers = [p for p in ("torch", "pypi") if any(k[0] == p for k in vals)]
for p in peers:
    labels.setdefault(p, "libtorch" if p == "torch" else "libtorch (PyPI)")
head = "| workload | threads | batch | unit | soma | spread | "
head += "".join(f"{labels[p]} | spread | speedup | " for p in peers)
head += "target | met | speedup by CPU time |"
print(head)
print("|" + " --- |" * (head.count("|") - 1))
keys = sorted({k[1:] for k in vals if k[0] in ("soma",) + tuple(peers) and k[1] != "cpu"},
              key=lambda k: (k[0] == "rss", k[1], k[2], k[3]))
missing = []  # rows without a figure on some side (--strict fails on them)
for key in keys:
    kind, w, t, b = key
    if kind == "rss" and w not in ("mlp_train", "lenet_train"):
        continue
    s = vals.get(("soma",) + key, [])
    ms, u = med(s), units[key]
    tg = target(kind, w, b)
    name = ("peak RSS " if kind == "rss" else "") + w
    cells, mets, cpus = [], [], []
    for p in peers:
        o = vals.get((p,) + key, [])
        mo = med(o)
        sp = None
        if ms and mo:
            sp = ms / mo if u in higher_better else mo / ms
        if not mo and not (kind == "bench" and w == "compile_time"):
            missing.append(f"{labels[p]}: {name} threads={t} batch={b}")
        cells.append(f"{fmt(mo)} | {spread(o):.0f}% | {'-' if sp is None else f'{sp:.2f}x'} | ")
        mets.append("-" if sp is None or tg is None else ("yes" if sp >= tg else "NO"))
        cs, co = med(vals.get(("soma", "cpu", w, t, b), [])), med(vals.get((p, "cpu", w, t, b), []))
        cpus.append(f"{cs / co if u in higher_better else co / cs:.2f}x" if cs and co and kind == "bench" else "-")
    if not ms:
        missing.append(f"soma: {name} threads={t} batch={b}")
    print(f"| {name} | {t} | {b} | {u} | {fmt(ms)} | {spread(s):.0f}% | " + "".join(cells) +
          f"{'-' if tg is None else f'{tg:g}x'} | {' / '.join(mets) or '-'} | {' / '.join(cpus) or '-'} |")
if missing:
    with open(sys.argv[1] + ".missing", "w") as f:
        f.write("\n".join(missing) + "\n")

# Workload 6: soma's matmul against the libraries called directly and the FMA peak.
peer = {k[1:]: med(v) for k, v in vals.items() if k[0] == "peer"}
if peer:
    print()
    print("| sgemm N | threads | soma GFLOP/s | OpenBLAS direct | oneDNN direct | soma / best (target 0.95) | FMA peak | soma / peak |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (kind, w, t, b), v in sorted(peer.items()):
        if w != "sgemm_openblas":
            continue
        s = med(vals.get(("soma", "bench", "sgemm", t, b), []))
        dn = peer.get(("bench", "sgemm_onednn", t, b))
        best = max(v, dn or 0)
        pk = peer.get(("bench", "fma_peak", t, 1))
        print(f"| {b} | {t} | {fmt(s)} | {fmt(v)} | {fmt(dn)} | "
              f"{'-' if s is None else f'{s / best:.2f}'} | {fmt(pk)} | "
              f"{'-' if s is None or not pk else f'{s / pk:.2f}'} |")

# Against an earlier build (--before): now / before, > 1 is faster now; a refactor keeps 0.97+.
if any(k[0] == "before" for k in vals):
    print()
    # The same ratio over process CPU time (the "cpu" lines): what a busy machine blurs least.
    print("| workload | threads | batch | unit | now | spread | before | spread | now / before | within 3% | now / before by CPU time | within 3% |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    def ratio(side_now, side_before, key):
        ms, mo = med(vals.get(side_now + key, [])), med(vals.get(side_before + key, []))
        if not (ms and mo):
            return None
        return ms / mo if units[key] in higher_better else mo / ms
    def cell(r):
        return ("-", "-") if r is None else (f"{r:.3f}", "yes" if r >= 0.97 else "NO")
    for key in sorted({k[1:] for k in vals if k[0] == "before" and k[1] == "bench"}):
        kind, w, t, b = key
        s, o = vals.get(("soma",) + key, []), vals.get(("before",) + key, [])
        ms, mo, u = med(s), med(o), units[key]
        ckey = ("cpu", w, t, b)
        units.setdefault(ckey, u)
        r, rc = cell(ratio(("soma",), ("before",), key)), cell(ratio(("soma",), ("before",), ckey))
        print(f"| {w} | {t} | {b} | {u} | {fmt(ms)} | {spread(s):.0f}% | {fmt(mo)} | {spread(o):.0f}% | "
              f"{r[0]} | {r[1]} | {rc[0]} | {rc[1]} |")

# Thread scaling: every workload should be faster with 2 threads than with 1.
if not any(k[3] == 2 for k in vals):
    sys.exit(0)
print()
print("| workload | batch | soma 2 threads / 1 thread | "
      + "".join(f"{labels[p]} 2 threads / 1 thread | " for p in peers))
print("|" + " --- |" * (3 + len(peers)))
for key in keys:
    kind, w, t, b = key
    if kind != "bench" or t != 1:
        continue
    row = []
    for side in ["soma"] + peers:
        one, two = med(vals.get((side, kind, w, 1, b), [])), med(vals.get((side, kind, w, 2, b), []))
        if one and two:
            r = two / one if units[key] in higher_better else one / two
            row.append(f"{r:.2f}x")
        else:
            row.append("-")
    if any(c != "-" for c in row):
        print(f"| {w} | {b} | " + " | ".join(row) + " |")
EOF

# --strict / --smoke: the script itself must have worked (timings are never judged here).
if [[ $STRICT == 1 ]]; then
  problems=$(cat "$OUT/failed.txt" "$RAW.missing" 2>/dev/null || true)
  if [[ -n $problems ]]; then
    log "FAILED (--strict):"; echo "$problems" | sed 's/^/  /' >&2; exit 1
  fi
  log "--strict: every program built and ran, every row has its figures"
fi
