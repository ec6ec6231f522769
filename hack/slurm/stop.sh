#!/usr/bin/env bash
# stop.sh ROOT -- stop every process running inside the chroot ROOT and unmount what
# start.sh mounted there. Safe to run any number of times, also on a half-started cluster.
#
# Processes are found by their root directory (/proc/PID/root is ROOT), not by name, so
# only what runs in this chroot is touched: the daemons (munged, slurmctld, slurmd x4,
# slurmrestd), their slurmstepds and any job processes they left. The root is compared by
# device and inode, not by its path: slurmds that oci.sh started as the root of a mount
# namespace of their own show "/" there.
set -uo pipefail
R=${1:?usage: stop.sh ROOT}
R=$(realpath "$R")
RID=$(stat -L -c %d:%i "$R")

chroot_pids() {
  stat -L -c '%n %d:%i' /proc/[0-9]*/root 2>/dev/null | awk -v id="$RID" '$2 == id {split($1, p, "/"); print p[3]}'
}
# wait_gone SECONDS: wait until no process is left in the chroot.
wait_gone() {
  local deadline=$(( $(date +%s) + $1 ))
  while [ -n "$(chroot_pids)" ]; do [ "$(date +%s)" -lt "$deadline" ] || return 1; sleep 0.2; done
}

pids=$(chroot_pids)
if [ -n "$pids" ]; then
  # TERM first so slurmctld saves state and slurmd/munged remove their sockets and pid
  # files; slurmstepds and job processes that outlive that get KILLed.
  kill -TERM $pids 2>/dev/null
  if ! wait_gone 5; then
    pids=$(chroot_pids)
    echo "[slurm] killing processes that ignored TERM for 5s:" $(ps -o pid=,comm= -p "$(echo $pids | tr ' ' ,)" | tr -s ' ' | sed 's/^ //; s/ /:/') >&2
    kill -KILL $pids 2>/dev/null
    wait_gone 5
  fi
fi
rm -f "$R"/run/slurm/*.pid "$R"/run/munge/munged.pid "$R"/run/slurmrestd.pid 2>/dev/null

# Unmount everything below ROOT, deepest first.
awk -v d="$R" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r |
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" || echo "[slurm] cannot unmount $m" >&2
  done
if awk -v d="$R" 'index($2, d "/") == 1 {f=1} END {exit !f}' /proc/self/mounts; then
  echo "[slurm] stop: mounts left under $R" >&2; exit 1
fi
if [ -n "$(chroot_pids)" ]; then echo "[slurm] stop: processes left in $R" >&2; exit 1; fi
echo "[slurm] stopped $R"
