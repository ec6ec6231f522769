#!/usr/bin/env bash
# start.sh ROOT -- start the single-host Slurm cluster in the chroot clone ROOT (made by
# clone-root.sh, configured by configure.sh): munged, MariaDB and slurmdbd (accounting),
# slurmctld, one slurmd per emulated node, slurmrestd with the slurmctld and slurmdbd APIs
# on 127.0.0.1:6820 (or the address configure.sh wrote to /etc/slurm/harness.env for a
# further cluster). Returns once every node is idle and slurmrestd answers an authenticated
# ping; on a timeout it prints the relevant log tails, stops everything and exits 1.
#
# Any previous instance (also a half-started one) is stopped first, and slurmctld's saved
# state and the accounting database are wiped, so every start begins with an empty queue,
# no job history and job ids from 1.
#
# Env: SLURM_START_TIMEOUT (s, default 120), SLURM_KEEP_ON_FAILURE=1 leaves daemons running.
set -euo pipefail
R=${1:?usage: start.sh ROOT}
R=$(realpath "$R")
HERE=$(cd "$(dirname "$0")" && pwd)
NODES=(n1 n2 n3 n4)
TIMEOUT=${SLURM_START_TIMEOUT:-120}
CLUSTER_NAME=trainyard
REST_ADDR=127.0.0.1:6820
# shellcheck source=/dev/null
[ ! -f "$R/etc/slurm/harness.env" ] || . "$R/etc/slurm/harness.env"
LOG=$R/var/log/slurm
t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1fs", b - a}'; }
say() { echo "[slurm +$(elapsed)] $*"; }
c() { chroot "$R" "$@"; }

[ -e "$R/.trainyard-clone" ] || { echo "start.sh: $R is not a clone; run clusters in clones (hack/slurm/clone-root.sh)" >&2; exit 1; }
[ -s "$R/etc/slurm/slurm.conf" ] || { echo "start.sh: $R has no slurm.conf; run hack/slurm/configure.sh $R" >&2; exit 1; }

fail() {
  echo "[slurm +$(elapsed)] FAILED: $*" >&2
  for f in "$LOG"/slurmdbd.log "$R"/var/log/mysql/error.log "$LOG"/slurmctld.log "$LOG"/slurmd-*.log "$LOG"/slurmrestd.log "$R"/var/log/munge/munged.log; do
    [ -s "$f" ] || continue
    echo "----- tail ${f#"$R"} -----" >&2; tail -n 25 "$f" >&2
  done
  c sinfo -N -o '%N %t %E' >&2 2>/dev/null || true
  [ "${SLURM_KEEP_ON_FAILURE:-}" = 1 ] || "$HERE/stop.sh" "$R" >&2 || true
  exit 1
}
# waitfor SECONDS WHAT CMD...: poll CMD every 0.2s until it succeeds.
waitfor() {
  local secs=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "$what not ready after ${secs}s"
    sleep 0.2
  done
  say "$what ready"
}

"$HERE/stop.sh" "$R" >/dev/null

mount -t proc proc "$R/proc"
mount -t sysfs -o ro sys "$R/sys"
mount --bind /dev "$R/dev"
mount --bind /dev/pts "$R/dev/pts"
mount -t tmpfs -o mode=1777,size=1g shm "$R/dev/shm"   # own /dev/shm: OpenMPI shared memory

# Clean slate: no saved jobs/nodes state, logs of this run only.
rm -rf "${R:?}"/var/spool/slurmctld/* "${R:?}"/var/spool/slurmd/*
# Each node's TmpFS (configure.sh), empty as after a reboot: job ids start at
# 1 again, and a PMIx directory a killed step left behind would fail step N.0.
rm -rf "${R:?}"/tmp/spmix_appdir_* "${R:?}"/tmp/slurm-n*
rm -f "$LOG"/*.log "$R"/var/log/munge/munged.log
mkdir -p "$R/run/munge" "$R/var/lib/munge" "$R/var/log/munge" "$R/run/slurm"
c chown munge:munge /run/munge /var/lib/munge /var/log/munge
c chown slurm:slurm /var/spool/slurmctld /var/log/slurm /run/slurm
for n in "${NODES[@]}"; do mkdir -p "$R/var/spool/slurmd/$n" "$R/tmp/slurm-$n"; chmod 1777 "$R/tmp/slurm-$n"; done

chroot --userspec=munge:munge "$R" /usr/sbin/munged </dev/null >/dev/null 2>&1 || fail "munged did not start"
waitfor 15 munged sh -c "chroot '$R' munge -n </dev/null | chroot '$R' unmunge"

# MariaDB on its unix socket only; slurm_acct_db starts empty (slurmdbd makes its tables).
# The database is made here: a slurmdbd that has to create it itself fails its next query
# against MariaDB 11.8 ("mysql_query failed: 5027 Number of columns in result ...").
mkdir -p "$R/run/mysqld"; c chown mysql:mysql /run/mysqld
rm -f "$R"/var/log/mysql/error.log
setsid chroot "$R" /usr/sbin/mariadbd --user=mysql --datadir=/var/lib/mysql --skip-networking \
  --socket=/run/mysqld/mysqld.sock --log-error=/var/log/mysql/error.log </dev/null >/dev/null 2>&1 &
waitfor 60 mariadb sh -c "chroot '$R' mariadb-admin --socket=/run/mysqld/mysqld.sock ping"
c mariadb --socket=/run/mysqld/mysqld.sock -e "DROP DATABASE IF EXISTS slurm_acct_db; CREATE DATABASE slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED VIA unix_socket;
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" || fail "mariadb: cannot prepare slurm_acct_db"
c /usr/sbin/slurmdbd </dev/null >/dev/null 2>&1 || fail "slurmdbd did not start"
waitfor 60 slurmdbd sh -c "chroot '$R' sacctmgr -n list cluster"
c sacctmgr -i -Q add cluster "$CLUSTER_NAME" >/dev/null || fail "sacctmgr add cluster"

c /usr/sbin/slurmctld </dev/null >/dev/null 2>&1 || fail "slurmctld did not start"
waitfor 30 slurmctld sh -c "chroot '$R' scontrol ping | grep -q UP"

for n in "${NODES[@]}"; do
  c /usr/sbin/slurmd -N "$n" </dev/null >/dev/null 2>&1 || fail "slurmd -N $n did not start"
done

# slurmrestd must not run as root or SlurmUser. It serves /slurm/ (slurmctld) and
# /slurmdb/ (slurmdbd: jobs slurmctld has forgotten).
setsid chroot --userspec=slurmrest:slurmrest "$R" env SLURM_JWT=daemon \
  /usr/sbin/slurmrestd -s openapi/slurmctld,openapi/slurmdbd \
  -d data_parser/v0.0.40,data_parser/v0.0.41,data_parser/v0.0.42 \
  -a rest_auth/jwt "$REST_ADDR" </dev/null >"$LOG/slurmrestd.log" 2>&1 &
echo $! > "$R/run/slurm/slurmrestd.pid"

all_idle() {
  local idle
  idle=$(c sinfo -h -N -p cpu -o '%N %t' | awk '$2 == "idle" {print $1}' | sort -u | wc -l)
  [ "$idle" -eq "${#NODES[@]}" ]
}
waitfor "$TIMEOUT" "${#NODES[@]} nodes idle" all_idle

# An authenticated ping proves the whole chain: slurmrestd -> JWT -> slurmctld.
rest_ping() {
  local tok
  tok=$(c scontrol token username=alice lifespan=60 2>/dev/null | sed -n 's/^SLURM_JWT=//p')
  [ -n "$tok" ] || return 1
  printf 'X-SLURM-USER-NAME: alice\nX-SLURM-USER-TOKEN: %s\n' "$tok" |
    c curl -fsS -m 5 -H @- "http://$REST_ADDR/slurm/v0.0.42/ping" | grep -q '"responding": *true'
}
kill -0 "$(cat "$R/run/slurm/slurmrestd.pid")" 2>/dev/null || fail "slurmrestd exited"
waitfor 30 "slurmrestd on $REST_ADDR" rest_ping

c sinfo -o '%P %a %D %t %G %N'
say "cluster up: slurmrestd http://$REST_ADDR, chroot $R"
