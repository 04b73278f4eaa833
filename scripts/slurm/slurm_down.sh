#!/usr/bin/env bash
# Vendored from the workplace recipe shared/validators/slurm/slurm_down.sh (2026-11-22).
# slurm_down.sh -- stop the daemons started by slurm_up.sh (by their pid files
# only) and, with --purge, delete $SLURM_TEST_DIR.
set -uo pipefail
D="${SLURM_TEST_DIR:-/tmp/slurm-test}"
[ -d "$D" ] || exit 0
stop_pid() {  # stop_pid PIDFILE NAME
  local f="$1" name="$2" pid
  [ -s "$f" ] || return 0
  pid="$(cat "$f")"
  # only kill if that pid really is the expected program
  if [ -r "/proc/$pid/comm" ] && grep -qx "$name" "/proc/$pid/comm"; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$f"
}
# cancel jobs first so slurmstepd processes go away cleanly
if [ -f "$D/etc/slurm.conf" ] && [ -s "$D/slurmctld.pid" ]; then
  SLURM_CONF="$D/etc/slurm.conf" timeout 10 scancel --full --quiet -u root 2>/dev/null || true
  sleep 0.5
fi
for f in "$D"/slurmd-*.pid; do [ -e "$f" ] && stop_pid "$f" slurmd; done
stop_pid "$D/slurmctld.pid" slurmctld
stop_pid "$D/munge/munged.pid" munged
# left-over job step daemons belonging to this cluster (their cmdline names our spool dir is not
# visible, so match slurmstepd whose parent is init and whose cwd/environ point at $D)
for p in $(pgrep -x slurmstepd 2>/dev/null); do
  if grep -qa "$D" "/proc/$p/environ" 2>/dev/null; then kill -9 "$p" 2>/dev/null; fi
done
# /etc/hosts line added by SLURM_TEST_ETC_HOSTS=1 (sed -i can fail on a bind-mounted
# /etc/hosts in containers; rewrite in place instead)
if grep -q '# slurm-test$' /etc/hosts 2>/dev/null; then
  grep -v '# slurm-test$' /etc/hosts >"$D/hosts.tmp" && cat "$D/hosts.tmp" >/etc/hosts && rm -f "$D/hosts.tmp"
fi
[ "${1:-}" = "--purge" ] && rm -rf "$D"
echo "slurm_down: stopped"
