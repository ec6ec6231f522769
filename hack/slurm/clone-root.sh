#!/usr/bin/env bash
# clone-root.sh ROOT NAME -- make (or reuse) a copy of the Slurm chroot ROOT for one harness
# cluster on this machine, and print its path last.
#
# Every cluster, the first one too, runs in a clone of its own: slurm.conf, keys, spool,
# logs, /run (munge's socket) and MariaDB's data live inside it, and the scripts find a
# cluster's processes by their root directory. ROOT, as build-root.sh leaves it, is only
# ever read: configure.sh and start.sh refuse a chroot that is not a clone (they look for
# the marker /.trainyard-clone, written here). A cluster once configured in ROOT itself
# while another cluster's clone was copied from it, and the copy failed ("cp: cannot stat
# .../etc/group.lock"). A clone is made in a temp dir and renamed into place once complete,
# so a clone that exists is whole, and two processes making one clone keep one of theirs.
#
# The clone is $(dirname ROOT)/clone-<key>-NAME, <key> being ROOT's: a rebuilt chroot yields
# new clones, and clones of chroots gone are removed here once nothing runs in them. /usr
# (but /usr/local) is hard-linked, since nothing writes files there in place, so a clone
# costs seconds and little disk; the rest is copied, without ROOT's keys, state, logs and
# database (a chroot configured in place by older scripts has them): configure.sh makes
# new ones for the clone (its own munge and JWT keys), so the clusters share nothing but
# read-only files.
#
# Usage: hack/slurm/clone-root.sh ROOT NAME     (as root; NAME: lowercase letters, digits)
# Env: CLONE_DIR puts the clones there instead of beside ROOT (on ROOT's filesystem: /usr
#      is hard-linked), as the clone test does.
set -euo pipefail
R=$(realpath "${1:?usage: clone-root.sh ROOT NAME}")
NAME=${2:?usage: clone-root.sh ROOT NAME}
[[ $NAME =~ ^[a-z0-9]{1,16}$ ]] || { echo "clone-root.sh: NAME must be 1-16 lowercase letters or digits, got '$NAME'" >&2; exit 1; }
[ -x "$R/usr/sbin/slurmrestd" ] || { echo "clone-root.sh: $R is not a Slurm chroot (run hack/slurm/build-root.sh)" >&2; exit 1; }
[ ! -e "$R/.trainyard-clone" ] || { echo "clone-root.sh: $R is a clone itself; clone the built chroot (bin/slurm-root)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "clone-root.sh must run as root" >&2; exit 1; }
BASE=${CLONE_DIR:-$(dirname "$R")}
KEY=$(basename "$R"); KEY=${KEY#root-}
DEST=$BASE/clone-$KEY-$NAME

# in_use DIR: a process runs with its root there, or something is mounted below it.
in_use() {
  local d; d=$(realpath -m "$1")
  [ -n "$(find /proc -mindepth 2 -maxdepth 2 -name root -lname "$d" 2>/dev/null)" ] ||
    awk -v d="$d" '$2 == d || index($2, d "/") == 1 {f=1} END {exit !f}' /proc/self/mounts
}

# Clones of other chroots, and temp dirs of ROOT's clones whose maker (.PID) has died.
for old in "$BASE"/clone-* "$BASE"/.tmp-clone-*; do
  [ -d "$old" ] || continue
  case "$old" in
    "$BASE/clone-$KEY-"*) continue ;;
    "$BASE/.tmp-clone-$KEY-"*) ! kill -0 "${old##*.}" 2>/dev/null || continue ;;
  esac
  in_use "$old" || rm -rf --one-file-system "$old"
done
if [ -d "$DEST" ]; then
  # Clones made before the marker existed are whole too (made and renamed as below).
  [ -e "$DEST/.trainyard-clone" ] || echo "$R" > "$DEST/.trainyard-clone"
  echo "[slurm] clone cached: $DEST"
  echo "$DEST"
  exit 0
fi

t0=$(date +%s.%N)
TMP=$BASE/.tmp-clone-$KEY-$NAME.$$
trap 'rm -rf --one-file-system "$TMP"' EXIT
mkdir "$TMP"
chmod --reference="$R" "$TMP"
for e in "$R"/*; do
  n=${e##*/}
  case "$n" in
    # Filled by start.sh's mounts, or scratch space: empty directories.
    proc|sys|dev|run|tmp) mkdir "$TMP/$n"; chmod --reference="$e" "$TMP/$n" ;;
    usr)
      cp -al "$e" "$TMP/usr"
      # configure.sh rewrites files under /usr/local (the torch shim): a copy of its own.
      rm -rf "$TMP/usr/local"; cp -a "$e/local" "$TMP/usr/local" ;;
    *) cp -a --one-file-system "$e" "$TMP/$n" ;;
  esac
done
# A running cluster's keys, state and records stay with it.
rm -rf "$TMP"/var/lib/mysql "$TMP"/var/spool/slurmctld/* "$TMP"/var/spool/slurmd/* \
  "$TMP"/var/log/slurm/* "$TMP"/var/log/mysql/* "$TMP"/var/log/munge/* "$TMP"/var/lib/munge/* \
  "$TMP"/etc/munge/munge.key "$TMP"/etc/slurm/jwt_hs256.key "$TMP"/etc/slurm/harness.env
echo "$R" > "$TMP/.trainyard-clone"
# Another process may have made it meanwhile: then keep theirs.
if mv -T "$TMP" "$DEST" 2>/dev/null; then trap - EXIT; else [ -d "$DEST" ] || exit 1; fi
echo "[slurm] cloned $R to $DEST in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1fs", b - a}')"
echo "$DEST"
