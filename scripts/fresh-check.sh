#!/usr/bin/env bash
# The fresh-machine check: both README commands in a clean Debian 12 root, as a new user (or CI)
# meets them. Run it before you stop when you touched the build, the scripts or a dependency.
#
#   sudo bash scripts/fresh-check.sh [--main-only] [--keep] [--root DIR]
#
# It makes a minimal Debian 12 (bookworm) root with debootstrap (Debian's packages only: no CUDA
# toolkit, no pyenv, nothing installed by hand), clones this repository's HEAD into it (commit
# first: what is not committed is not checked), and runs there, as root, one after the other:
#   bash scripts/run-main.sh    (must print the test accuracy; the README's goal: 8 minutes)
#   bash scripts/test.sh        (must pass; skipped with --main-only)
# Then it prints each command's wall time, exit status and last lines. Logs: ROOT-logs/*.log.
#   --root DIR   where to make the root (default: /var/tmp/soma-fresh; removed first)
#   --keep       leave the root in place afterwards (default: removed when both passed)
#   MIRROR       the Debian mirror (default: http://deb.debian.org/debian)
# Needs root, debootstrap (apt-get install debootstrap) and the network to Debian and PyPI. Not
# part of CI (a CI machine is itself the fresh machine).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT=/var/tmp/soma-fresh
MAIN_ONLY=0 KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --main-only) MAIN_ONLY=1 ;;
    --keep) KEEP=1 ;;
    --root) ROOT="${2:?--root needs a directory}"; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "fresh-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
[[ $(id -u) -eq 0 ]] || { echo "fresh-check: run as root (debootstrap and chroot need it)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "fresh-check: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }
[[ -z "$(git -C "$REPO" status --porcelain --untracked-files=no)" ]] ||
  echo "fresh-check: note: uncommitted changes are not part of the check (it clones HEAD)"

log() { echo "fresh-check: $*"; }
unmount_all() {
  for m in dev/pts dev proc sys; do
    mountpoint -q "$ROOT/$m" 2>/dev/null && umount -l "$ROOT/$m" || true
  done
}
trap unmount_all EXIT

LOGS="$ROOT-logs"
if [[ -e $ROOT ]]; then
  unmount_all
  rm -rf --one-file-system "$ROOT"
fi
rm -rf "$LOGS"
mkdir -p "$ROOT" "$LOGS"
t0=$(date +%s)
log "debootstrap bookworm into $ROOT (minbase)"
debootstrap --variant=minbase --include=ca-certificates,git bookworm "$ROOT" "$MIRROR" \
  >"$LOGS/debootstrap.log" 2>&1 || { tail -20 "$LOGS/debootstrap.log" >&2; exit 1; }
# A fresh Debian 12 machine's sources: the release, its updates and security.
cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# The host's own trust anchors (a site's TLS-inspecting proxy, say): without them HTTPS to PyPI
# fails in the root where it works on every machine of the site.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  chroot "$ROOT" update-ca-certificates >/dev/null 2>&1 || true
fi
mount -t proc proc "$ROOT/proc"
mount -t sysfs sys "$ROOT/sys"
mount --bind /dev "$ROOT/dev"
mount --bind /dev/pts "$ROOT/dev/pts"
COMMIT=$(git -C "$REPO" rev-parse --short HEAD)
log "root ready in $(( $(date +%s) - t0 )) s; cloning $COMMIT"
git clone --quiet --no-hardlinks "$REPO" "$ROOT/root/soma"

# Runs one README command in the root; records its time and status.
declare -A took status
run_in_root() {
  local name=$1 cmd=$2 t
  log "running '$cmd' in the fresh root (log: $LOGS/$name.log)"
  t=$(date +%s)
  set +e
  # (a clean environment; pip is pointed at the system's trust store as on the host)
  chroot "$ROOT" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt ${PIP_DEFAULT_TIMEOUT:+PIP_DEFAULT_TIMEOUT=$PIP_DEFAULT_TIMEOUT} \
    bash -c "cd /root/soma && $cmd" >"$LOGS/$name.log" 2>&1
  status[$name]=$?
  set -e
  took[$name]=$(( $(date +%s) - t ))
}
run_in_root main "bash scripts/run-main.sh"
(( MAIN_ONLY )) || run_in_root test "bash scripts/test.sh"

echo
echo "==== fresh-machine check ($(date -u +%F), $(nproc) cores, commit $COMMIT)"
ok=1
for name in main test; do
  [[ -n ${took[$name]:-} ]] || continue
  printf '%-5s exit %d after %dm %02ds\n' "$name" "${status[$name]}" $(( took[$name] / 60 )) $(( took[$name] % 60 ))
  tail -3 "$LOGS/$name.log" | sed 's/^/      /'
  (( status[$name] == 0 )) || ok=0
done
if [[ ${took[main]:-} ]]; then
  grep -q "^test accuracy" "$LOGS/main.log" || { echo "main: no test accuracy printed"; ok=0; }
  (( took[main] <= 480 )) || echo "main: over the README's 8 minutes"
fi
unmount_all
if (( ok && !KEEP )); then
  rm -rf --one-file-system "$ROOT"
  log "passed; root removed (--keep leaves it); logs in $LOGS"
fi
(( ok ))
