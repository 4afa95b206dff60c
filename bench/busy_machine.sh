#!/usr/bin/env bash
# Threads on a busy machine (docs/reliability.md): `soma bench` MLP training at 2 threads, on an
# idle machine and next to one competing busy process (`yes > /dev/null`), under three OpenMP
# wait settings:
#   libgomp  libgomp's own default (threads spin 300,000 times before sleeping): SOMA_OMP_DEFAULTS=0
#   passive  OMP_WAIT_POLICY=passive (threads sleep at once)
#   soma     soma's default (src/startup/omp_defaults.cpp: passive when other work competes at start)
#   spin=N   GOMP_SPINCOUNT=N (with SETTINGS="libgomp passive spin=1000 soma" ...)
# Each configuration runs RUNS times, the settings alternated within each round; the line per
# configuration gives the median samples/s (higher is better) and every run's figure.
#
#   bench/busy_machine.sh [SOMA_BINARY] [RUNS] [STEPS]
#   bench/busy_machine.sh build/apps/soma/soma 3 200
# On a machine shared with other work at normal priority, `nice -n -10 bench/busy_machine.sh`
# keeps that work from blurring the idle figures (the competitor inherits the same priority).
set -euo pipefail
soma=${1:-build/apps/soma/soma}
runs=${2:-3}
steps=${3:-200}
[[ -x $soma ]] || { echo "busy_machine.sh: no soma binary at $soma" >&2; exit 2; }
settings=${SETTINGS:-libgomp passive soma}
unset OMP_WAIT_POLICY GOMP_SPINCOUNT SOMA_OMP_DEFAULTS

one_run() {  # $1: setting; prints samples/s
  local env=()
  case $1 in
    libgomp) env=(SOMA_OMP_DEFAULTS=0) ;;
    passive) env=(OMP_WAIT_POLICY=passive) ;;
    soma) env=() ;;
    spin=*) env=(GOMP_SPINCOUNT=${1#spin=}) ;;
  esac
  env "${env[@]}" "$soma" bench --workload mlp_train --threads 2 --batch 32 --steps "$steps" \
    2>/dev/null | sed -n 's/.* value=\([0-9.e+]*\) .*/\1/p'
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

competitor=
cleanup() { [[ -n $competitor ]] && kill "$competitor" 2>/dev/null || true; }
trap cleanup EXIT

echo "# $(date -u +%FT%TZ) $(nproc) cores, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for machine in idle loaded; do
  if [[ $machine == loaded ]]; then
    yes > /dev/null &
    competitor=$!
    sleep 0.5
  fi
  declare -A figures=()
  for ((r = 0; r < runs; ++r)); do
    for setting in $settings; do
      figures[$setting]+="$(one_run $setting) "
    done
  done
  for setting in $settings; do
    # shellcheck disable=SC2086
    echo "busy_machine machine=$machine setting=$setting median=$(median ${figures[$setting]}) unit=samples/s runs=[${figures[$setting]% }] load=$(cut -d' ' -f1 /proc/loadavg)"
  done
  unset figures
  if [[ -n $competitor ]]; then
    kill "$competitor"
    wait "$competitor" 2>/dev/null || true
    competitor=
  fi
done
