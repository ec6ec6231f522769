#!/usr/bin/env bash
# daemon.sh ROOT stop|start slurmctld|slurmrestd|slurmdbd -- stop or start one daemon of a
# running harness cluster, to rehearse an outage. slurmctld is stopped with TERM, so it
# saves its state, and started without clearing it, so it recovers the jobs it had.
# slurmdbd is stopped alone (MariaDB keeps running): slurmctld queues its records for
# slurmdbd meanwhile and sends them once it is back.
set -euo pipefail
R=${1:?usage: daemon.sh ROOT stop|start slurmctld|slurmrestd|slurmdbd}
R=$(realpath "$R")
ACTION=${2:?}
DAEMON=${3:?}
REST_ADDR=127.0.0.1:6820
# shellcheck source=/dev/null
[ ! -f "$R/etc/slurm/harness.env" ] || . "$R/etc/slurm/harness.env"
c() { chroot "$R" "$@"; }

# pid_of NAME: the chroot's process with that command name.
pid_of() {
  local p
  for p in $(find /proc -mindepth 2 -maxdepth 2 -name root -lname "$R" 2>/dev/null | cut -d/ -f3); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$1" ] && echo "$p"
  done
  return 0
}
waitfor() {
  local secs=$1; shift
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "daemon.sh: $ACTION $DAEMON: not done after ${secs}s" >&2; exit 1; }
    sleep 0.2
  done
}
gone() { [ -z "$(pid_of "$DAEMON")" ]; }

case "$ACTION/$DAEMON" in
  stop/slurmctld|stop/slurmrestd|stop/slurmdbd)
    pids=$(pid_of "$DAEMON")
    [ -z "$pids" ] || kill -TERM $pids
    waitfor 15 gone
    ;;
  start/slurmctld)
    gone || { echo "daemon.sh: slurmctld runs already" >&2; exit 1; }
    c /usr/sbin/slurmctld </dev/null >/dev/null 2>&1
    waitfor 30 sh -c "chroot '$R' scontrol ping | grep -q UP"
    ;;
  start/slurmdbd)
    gone || { echo "daemon.sh: slurmdbd runs already" >&2; exit 1; }
    c /usr/sbin/slurmdbd </dev/null >/dev/null 2>&1
    waitfor 60 sh -c "chroot '$R' sacctmgr -n list cluster"
    ;;
  start/slurmrestd)
    gone || { echo "daemon.sh: slurmrestd runs already" >&2; exit 1; }
    # The same command line as start.sh.
    setsid chroot --userspec=slurmrest:slurmrest "$R" env SLURM_JWT=daemon \
      /usr/sbin/slurmrestd -s openapi/slurmctld,openapi/slurmdbd \
      -d data_parser/v0.0.40,data_parser/v0.0.41,data_parser/v0.0.42 \
      -a rest_auth/jwt "$REST_ADDR" </dev/null >>"$R/var/log/slurm/slurmrestd.log" 2>&1 &
    echo $! > "$R/run/slurm/slurmrestd.pid"
    waitfor 30 bash -c "exec 3<>/dev/tcp/${REST_ADDR%:*}/${REST_ADDR#*:}"
    ;;
  *) echo "daemon.sh: unknown action $ACTION $DAEMON" >&2; exit 1 ;;
esac
echo "[slurm] $ACTION $DAEMON done"
