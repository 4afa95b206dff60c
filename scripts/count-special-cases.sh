#!/usr/bin/env bash
# Counts the places in src/ that pick an op, layer or option by name or by type instead of
# reading a definition (issue 21): string-literal compares (== "x", != "x"), dynamic_cast<
# and typeid(. `scripts/count-special-cases.sh` prints the total; `-v` lists them by file.
set -euo pipefail
cd "$(dirname "$0")/.."
hits=$(grep -rnE '(==|!=) *"[^"]*"|"[^"]*" *(==|!=)|dynamic_cast<|typeid\(' src \
  --include=*.cpp --include=*.hpp --include=*.cu --include=*.h || true)
if [[ "${1:-}" == "-v" ]]; then
  echo "$hits" | cut -d: -f1 | sort | uniq -c | sort -rn
  echo "$hits"
fi
echo "$hits" | grep -c . || true
