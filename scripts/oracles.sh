#!/usr/bin/env bash
# The test oracles' Python environment: one virtual environment holding exactly the packages of
# scripts/oracles.lock (test group, plus the groups named), which the tests find by its path
# (CMake's SOMA_ORACLE_PYTHON, default .oracles/bin/python in the repository root).
#
#   bash scripts/oracles.sh [GROUP...]   create or update it (the test group is always included,
#                                        and the groups it already has are kept)
#   bash scripts/oracles.sh --check      exit 0 when it exists and matches the lock, else say why
#   bash scripts/oracles.sh --pin NAME   print NAME==VERSION from the lock (bench/compare.sh's torch)
#   SOMA_ORACLE_VENV  where the environment lives (default: ROOT/.oracles)
#
# It is built from Debian's python3 (/usr/bin/python3 with python3-venv) when that can make a
# virtual environment, else from the python3 on PATH, with `pip install --no-deps` of the lock's
# lines only: nothing unpinned is pulled in, and nothing the user installed into their own
# python3 is seen (a venv has no user site-packages). A stamp (the lock's lines for the groups and
# the base interpreter's version) makes a second run a no-op that needs no network. Without PyPI
# it fails and removes the half-made environment; the tests that need it then skip, saying so.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCK="$ROOT/scripts/oracles.lock"
VENV="${SOMA_ORACLE_VENV:-$ROOT/.oracles}"

# The lock's "name==version" lines of the groups given (test first), one per line.
lock_lines() {
  awk -v groups=" test $* " '
    /^[[:space:]]*(#|$)/ { next }
    /^\[/ { g = $0; gsub(/[][[:space:]]/, "", g); keep = index(groups, " " g " ") > 0; next }
    keep { print $1 }' "$LOCK"
}

# What goes into the environment: torch's wheel (bench group) is installed by bench/compare.sh on
# its own, with --target, for its libtorch only.
venv_lines() { lock_lines "$@" | grep -v '^torch==' || true; }

norm() { tr 'A-Z_.' 'a-z--'; }  # pip's name normalisation (PEP 503), for comparing freeze lines

base_python() {
  if [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    echo /usr/bin/python3
  elif command -v python3 >/dev/null 2>&1; then
    command -v python3
  fi
}

# Exit 0 when VENV holds exactly the lock's lines for the groups (pip itself aside).
check() {
  local py="$VENV/bin/python"
  [[ -x $py ]] || { echo "oracles: no environment at $VENV (bash scripts/oracles.sh makes it)"; return 1; }
  local want have extra missing
  want=$(venv_lines "$@" | norm | sort)
  have=$("$py" -m pip freeze --all --disable-pip-version-check 2>/dev/null | norm | grep -v '^pip==' | sort)
  extra=$(comm -13 <(echo "$want") <(echo "$have"))
  missing=$(comm -23 <(echo "$want") <(echo "$have"))
  if [[ -n $extra || -n $missing ]]; then
    echo "oracles: $VENV differs from scripts/oracles.lock"
    [[ -z $missing ]] || echo "  missing or another version: $(echo $missing)"
    [[ -z $extra ]] || echo "  not in the lock: $(echo $extra)"
    return 1
  fi
  "$py" -m pip check --disable-pip-version-check >/dev/null 2>&1 ||
    { echo "oracles: pip check fails in $VENV:"; "$py" -m pip check || true; return 1; }
}

case "${1:-}" in
  --pin)
    line=$(awk -v n="$(echo "${2:?usage: oracles.sh --pin NAME}" | norm)" \
      '!/^[[:space:]]*(#|\[|$)/ { split($1, a, "=="); m = tolower(a[1]); gsub(/[_.]/, "-", m); if (m == n) { print $1; exit } }' "$LOCK")
    [[ -n $line ]] || { echo "oracles: $2 is not in scripts/oracles.lock" >&2; exit 1; }
    echo "$line"
    exit 0 ;;
  --check)
    shift
    groups=()
    [[ -f $VENV/.groups ]] && read -ra groups <"$VENV/.groups"
    check "${groups[@]}" "$@" && echo "oracles: $VENV matches scripts/oracles.lock (groups: test ${groups[*]} $*)"
    exit ;;
esac

# The groups asked for, and those the environment already has (a plain run keeps them).
groups=("$@")
if [[ -f $VENV/.groups ]]; then
  read -ra had <"$VENV/.groups" || true
  for g in "${had[@]}"; do
    [[ " ${groups[*]} " == *" $g "* ]] || groups+=("$g")
  done
fi
py=$(base_python)
[[ -n $py ]] || { echo "oracles: no python3 to make the environment from; the oracle tests will skip" >&2; exit 1; }
stamp="$(venv_lines "${groups[@]}") $("$py" -V 2>&1) $py"
if [[ -f $VENV/.stamp && "$(cat "$VENV/.stamp")" == "$stamp" ]] && check "${groups[@]}" >/dev/null; then
  echo "oracles: $VENV is up to date (scripts/oracles.lock, groups: test ${groups[*]})"
  exit 0
fi

echo "oracles: making $VENV from scripts/oracles.lock with $py (groups: test ${groups[*]})"
rm -rf "$VENV"
fail() {
  echo "oracles: $1; removed $VENV, the tests that need it will skip" >&2
  rm -rf "$VENV"
  exit 1
}
"$py" -m venv "$VENV" || fail "could not make a virtual environment with $py"
req=$(mktemp)
trap 'rm -f "$req"' EXIT
venv_lines "${groups[@]}" >"$req"
timeout 900 "$VENV/bin/python" -m pip install --quiet --no-deps --no-input \
  --disable-pip-version-check -r "$req" || fail "pip could not install the lock's packages (no PyPI?)"
check "${groups[@]}" || fail "the environment does not match the lock"
echo "${groups[*]}" >"$VENV/.groups"
echo "$stamp" >"$VENV/.stamp"
echo "oracles: $VENV ready ($(wc -l <"$req") packages)"
