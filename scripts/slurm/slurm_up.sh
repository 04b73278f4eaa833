#!/usr/bin/env bash
# Vendored from the workplace recipe shared/validators/slurm/slurm_up.sh (2026-11-22).
# slurm_up.sh [NNODES] -- start a throw-away Slurm 22.05 cluster on this one host.
#
# * Everything (munge key/socket, slurm.conf, state, spool, logs) lives under
#   $SLURM_TEST_DIR (default /tmp/slurm-test); no systemd, nothing in /etc is changed.
# * NNODES (default 1) slurmd daemons are started, each a separate Slurm node
#   n1..nN on 127.0.0.1 with its own port (slurmd -N nX). Each fake node claims
#   $FAKE_CPUS CPUs, $FAKE_MEM_MB memory and $FAKE_GPUS GPUs of type $FAKE_GPU_TYPE
#   (no real GPUs: gres.conf with Count= and no File=, SlurmdParameters=config_overrides).
# * Re-runnable: it first calls slurm_down.sh (kills only daemons recorded in its
#   own pid files) and wipes the state dir.
# * Afterwards:  source "$SLURM_TEST_DIR/env.sh"   (exports SLURM_CONF)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NNODES="${1:-${NNODES:-1}}"
D="${SLURM_TEST_DIR:-/tmp/slurm-test}"
CTLD_PORT="${SLURMCTLD_PORT:-16817}"
SLURMD_PORT0="${SLURMD_PORT_BASE:-16900}"   # node i listens on SLURMD_PORT0+i
FAKE_CPUS="${FAKE_CPUS:-96}"
FAKE_MEM_MB="${FAKE_MEM_MB:-1000000}"
FAKE_GPUS="${FAKE_GPUS:-8}"
FAKE_GPU_TYPE="${FAKE_GPU_TYPE:-h100}"
T0=$(date +%s.%N)

# 1. packages (Debian 12: slurm-wlm 22.05.8). policy-rc.d in containers stops
#    the postinst from starting services; on a real systemd host the packaged
#    units may start, which we do not need -- we never use /etc/slurm.
need=()
for b in munged slurmctld slurmd sbatch; do command -v "$b" >/dev/null || need+=("$b"); done
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ] || apt-get update -qq
  apt-get install -y -qq --no-install-recommends munge slurmctld slurmd slurm-client >/dev/null
fi

# 2. clean slate
"$HERE/slurm_down.sh" >/dev/null 2>&1 || true
rm -rf "$D"
mkdir -p "$D"/{etc,munge,state,log,spool,jobs}
chmod 755 "$D/munge"   # munged insists the socket dir is o+x

# 3. munge with a private key and socket
dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$D/munge/munge.key"
munged --key-file="$D/munge/munge.key" --socket="$D/munge/munge.sock" \
       --pid-file="$D/munge/munged.pid" --log-file="$D/log/munged.log" \
       --seed-file="$D/munge/munged.seed"
# munge socket dir must be reachable by job users; we run everything as root.

# 4. slurm.conf + gres.conf + cgroup.conf
HOST="$(hostname -s)"
LAST_PORT=$((SLURMD_PORT0 + NNODES))
cat >"$D/etc/slurm.conf" <<EOF
ClusterName=ci
SlurmctldHost=${HOST}(127.0.0.1)
SlurmctldPort=${CTLD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${D}/munge/munge.sock
StateSaveLocation=${D}/state
SlurmdSpoolDir=${D}/spool/%n
SlurmctldPidFile=${D}/slurmctld.pid
SlurmdPidFile=${D}/slurmd-%n.pid
SlurmctldLogFile=${D}/log/slurmctld.log
SlurmdLogFile=${D}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
# node hardware in this file wins over what slurmd detects (fake 8-GPU nodes on a 2-core VM)
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=600
MessageTimeout=10
NodeName=n[1-${NNODES}] NodeHostname=${HOST} NodeAddr=127.0.0.1 Port=[$((SLURMD_PORT0+1))-${LAST_PORT}] CPUs=${FAKE_CPUS} RealMemory=${FAKE_MEM_MB} Gres=gpu:${FAKE_GPU_TYPE}:${FAKE_GPUS} State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
# GPUs need File=: a Count-only gpu line is dropped by slurmd ("Removing file-less
# GPU gpu:h100 from final GRES list") and the node goes INVAL ("gres/gpu count
# reported lower than configured (0 < 8)"). Regular files are accepted but logged as
# "not a valid character or block device"; symlinks to /dev/null pass silently.
mkdir -p "$D/dev"
for g in $(seq 0 $((FAKE_GPUS - 1))); do ln -s /dev/null "$D/dev/nvidia$g"; done
cat >"$D/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=n[1-${NNODES}] Name=gpu Type=${FAKE_GPU_TYPE} File=${D}/dev/nvidia[0-$((FAKE_GPUS - 1))]
EOF
# 22.05 has no CgroupPlugin=disabled; slurmd loads a cgroup plugin even with
# proctrack/pgid + task/none. autodetect picks v1 or v2 from /sys/fs/cgroup.
cat >"$D/etc/cgroup.conf" <<EOF
CgroupPlugin=${CGROUP_PLUGIN:-autodetect}
EOF
cat >"$D/env.sh" <<EOF
export SLURM_CONF=${D}/etc/slurm.conf
EOF
export SLURM_CONF="$D/etc/slurm.conf"

# Node names n1..nN are not resolvable. Job scripts that use the node name as
# MASTER_ADDR / rdzv endpoint (scontrol show hostnames | head -1) then fail with
# "gai error: -2 - Name or service not known". SLURM_TEST_ETC_HOSTS=1 adds
# "127.0.0.1 n1 n2 ..." to /etc/hosts (tagged; slurm_down.sh removes it).
if [ "${SLURM_TEST_ETC_HOSTS:-0}" = 1 ]; then
  names=$(for i in $(seq 1 "$NNODES"); do printf 'n%s ' "$i"; done)
  grep -v '# slurm-test$' /etc/hosts >"$D/hosts.tmp" || true; cat "$D/hosts.tmp" >/etc/hosts
  echo "127.0.0.1 ${names}# slurm-test" >>/etc/hosts
fi

# 5. daemons
slurmctld -f "$SLURM_CONF" -i
for i in $(seq 1 "$NNODES"); do
  mkdir -p "$D/spool/n$i"
  slurmd -f "$SLURM_CONF" -N "n$i"
done

# 6. wait until every node is idle
for _ in $(seq 1 120); do
  idle=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
  [ "$idle" -ge "$NNODES" ] && break
  sleep 0.25
done
sinfo -N -o '%N %T %c %m %G' || true
if [ "$(sinfo -h -N -t idle -o '%N' | sort -u | wc -l)" -lt "$NNODES" ]; then
  echo "slurm_up: nodes not idle; see $D/log" >&2
  tail -n 20 "$D"/log/*.log >&2
  exit 1
fi
printf 'slurm_up: %s node(s) idle in %.1fs; source %s/env.sh\n' "$NNODES" \
  "$(echo "$(date +%s.%N) - $T0" | bc)" "$D"
