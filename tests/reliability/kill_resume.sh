#!/usr/bin/env bash
# Kill/resume test (docs/reliability.md). SIGKILLs a checkpointing training run at random
# moments (a good share of them while a checkpoint is being written), checks after every kill
# that the last checkpoint loads, resumes, and repeats until the run finishes; its final weights
# must equal, bit for bit, those of an uninterrupted run with the same seed.
#
#   kill_resume.sh TRAINER WORKDIR [RUNS] [EPOCHS]     (defaults: 3 interrupted runs, 30 epochs)
#   TRAINER_FLAGS=--no-restore-rng: the negative control (resuming without the saved RNG state
#   must give different weights, so the test can fail).
# Prints the kills, the kills that landed during a checkpoint write (they leave the writer's
# .tmp.<pid> file behind) and the runs whose final weights matched.
set -euo pipefail
TRAINER="$1"
WORK="$2"
RUNS="${3:-3}"
EPOCHS="${4:-30}"
rm -rf "$WORK"
mkdir -p "$WORK"

ms() { date +%s%3N; }

# Three uninterrupted runs: the reference weights (all three must agree), and the shortest run
# time, which sets the range of kill delays (the machine's load varies the time a lot).
ref_ms=0
for i in 1 2 3; do
  t0=$(ms)
  "$TRAINER" --ckpt "$WORK/ref$i.soma" --out "$WORK/ref$i.bin" --epochs "$EPOCHS"
  t=$(( $(ms) - t0 ))
  (( ref_ms == 0 || t < ref_ms )) && ref_ms=$t
  if ! cmp -s "$WORK/ref$i.bin" "$WORK/ref1.bin"; then
    echo "FAIL: two uninterrupted runs with the same seed ended with different weights" >&2
    exit 1
  fi
done
cp "$WORK/ref1.bin" "$WORK/ref.bin"
echo "uninterrupted run: ${ref_ms} ms (shortest of 3, identical weights)"

kills=0
during_write=0
matched=0
for run in $(seq 1 "$RUNS"); do
  ck="$WORK/run$run.soma"
  out="$WORK/run$run.bin"
  rm -f "$ck" "$out"
  starts=0
  while true; do
    starts=$((starts + 1))
    if (( starts > 500 )); then echo "run $run: no progress after 500 starts" >&2; exit 1; fi
    "$TRAINER" --ckpt "$ck" --out "$out" --epochs "$EPOCHS" --resume ${TRAINER_FLAGS:-} &
    pid=$!
    # A random moment within half an uninterrupted run (process start-up included), so that most
    # starts are killed and each run is interrupted several times.
    delay=$(( RANDOM % (ref_ms / 2 + 1) ))
    sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
    kill -KILL "$pid" 2>/dev/null || true
    set +e
    wait "$pid" 2>/dev/null
    status=$?
    set -e
    if (( status == 0 )); then
      break  # it finished before the kill
    elif (( status == 137 )); then
      kills=$((kills + 1))
      if compgen -G "$ck.tmp.*" >/dev/null; then
        during_write=$((during_write + 1))
        rm -f "$ck".tmp.*
      fi
      if ! "$TRAINER" --check "$ck"; then
        echo "FAIL: after kill $kills the checkpoint $ck does not load" >&2
        exit 1
      fi
    else
      echo "FAIL: run $run exited with status $status (see above)" >&2
      exit 1
    fi
  done
  if cmp -s "$out" "$WORK/ref.bin"; then
    matched=$((matched + 1))
    echo "run $run: finished after $((starts - 1)) kills; final weights match the uninterrupted run"
  else
    echo "FAIL: run $run: final weights differ from the uninterrupted run" >&2
    exit 1
  fi
done
echo "kill/resume: $kills kills ($during_write during a checkpoint write), every checkpoint loaded, $matched/$RUNS runs matched bit for bit"
