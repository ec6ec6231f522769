#!/usr/bin/env bash
# build-root.sh -- build (or reuse) the Debian trixie chroot that holds Slurm 24.11.
#
# Debian 12 ships Slurm 22.05 (REST v0.0.38 only), too old for slurm-client v1.0.1, so the
# test cluster runs from a trixie chroot (Slurm 24.11, REST v0.0.40-v0.0.42). The chroot is
# cached under $TRAINYARD_CACHE/slurm/root-<key>, <key> being a hash of this script: editing
# the package list below yields a new key and therefore a rebuild. It is built in a temp dir
# and renamed into place only once complete, so an interrupted build is never reused.
#
# Leaves ROOT_OF_REPO/bin/slurm-root -> the chroot and prints the chroot path last.
# Usage: hack/slurm/build-root.sh        (as root; idempotent)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${TRAINYARD_CACHE:-$HOME/.cache/trainyard}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=trixie
KEY=$(sha256sum "$0" | cut -c1-12)
BASE=$CACHE/slurm
DEST=$BASE/root-$KEY
PKGS=(
  slurmctld slurmd slurmrestd slurm-client munge slurm-wlm-jwt-plugin
  openmpi-bin libopenmpi-dev gcc libc6-dev python3-minimal
  curl ca-certificates procps
  # Accounting: slurmdbd on MariaDB, so finished jobs stay readable through slurmrestd.
  slurmdbd mariadb-server
  # A real PyTorch (CPU) for torchrun jobs; see configure.sh for its libuv shim.
  python3-torch
  # OCI containers (containerRuntime OCI): Slurm's --container runs bundles with crun;
  # job scripts resolve an image into a bundle with skopeo (copy) and umoci (unpack).
  crun skopeo umoci
)

t0=$(date +%s); ts=$t0
stage() { local now; now=$(date +%s); echo "[slurm-root] $1 took $((now - ts))s (total $((now - t0))s)"; ts=$now; }

[ "$(id -u)" = 0 ] || { echo "build-root.sh must run as root (debootstrap, chroot)" >&2; exit 1; }
mkdir -p "$BASE" "$REPO/bin"

# umount_under DIR: unmount everything mounted below DIR, deepest first.
umount_under() {
  local d; d=$(realpath -m "$1")
  awk -v d="$d" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
}
has_mounts() { local d; d=$(realpath -m "$1"); awk -v d="$d" '$2 == d || index($2, d "/") == 1 {f=1} END {exit !f}' /proc/self/mounts; }

if [ -d "$DEST" ]; then
  echo "[slurm-root] cached: $DEST"
else
  if ! command -v debootstrap >/dev/null; then
    # apt-get update only when the host has no package lists yet or install fails without it.
    if ! apt-get install -y --no-install-recommends debootstrap; then
      apt-get update && apt-get install -y --no-install-recommends debootstrap
    fi
    stage "install debootstrap"
  fi
  # Remove leftovers of interrupted builds (after unmounting whatever they still had mounted).
  for old in "$BASE"/.tmp-root-*; do
    [ -e "$old" ] || continue
    umount_under "$old"; has_mounts "$old" || rm -rf --one-file-system "$old"
  done
  TMP=$BASE/.tmp-root-$KEY.$$
  trap 'umount_under "$TMP"' EXIT
  mkdir -p "$TMP" "$BASE/debs"
  # Downloaded .debs are kept in $BASE/debs so a rebuild after a package-list change is fast.
  debootstrap --variant=minbase --cache-dir="$BASE/debs" "$SUITE" "$TMP" "$MIRROR"
  stage "debootstrap $SUITE"

  # No daemon may be started by package scripts inside the chroot.
  printf '#!/bin/sh\nexit 101\n' > "$TMP/usr/sbin/policy-rc.d"; chmod 0755 "$TMP/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$TMP/etc/resolv.conf" 2>/dev/null || true
  mount -t proc proc "$TMP/proc"
  mount --bind /dev "$TMP/dev"
  mkdir -p "$TMP/var/cache/apt/archives"
  mount --bind "$BASE/debs" "$TMP/var/cache/apt/archives"
  c() { chroot "$TMP" env DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"; }
  c apt-get update -q
  c apt-get install -y -q --no-install-recommends "${PKGS[@]}"
  stage "apt-get install ${#PKGS[@]} packages"

  # srun --mpi=pmix needs Slurm's mpi/pmix plugin; it comes with slurm-wlm-basic-plugins in
  # trixie. Fail here rather than in a later MPI test if the packaging ever changes.
  plugdir=$(dirname "$(find "$TMP/usr/lib" -name 'select_cons_tres.so' -print -quit)")
  if ! ls "$plugdir"/mpi_pmix*.so >/dev/null 2>&1; then
    echo "[slurm-root] mpi/pmix plugin missing under ${plugdir#"$TMP"}" >&2; exit 1
  fi
  for p in rest_auth_jwt auth_jwt openapi_slurmctld openapi_slurmdbd accounting_storage_slurmdbd accounting_storage_mysql data_parser_v0_0_41 data_parser_v0_0_42 gres_gpu topology_tree; do
    ls "$plugdir/$p.so" >/dev/null || { echo "[slurm-root] plugin $p.so missing" >&2; exit 1; }
  done
  c sh -c 'slurmctld -V; slurmdbd -V; mariadbd --version; ompi_info --version | head -1
    python3 -c "import torch; print(\"torch\", torch.__version__)"
    crun --version | head -1; skopeo --version; umoci --version' | sed 's/^/[slurm-root] /'
  umount_under "$TMP"; trap - EXIT
  # The .debs live in the shared cache, not in the chroot.
  rm -rf "$TMP/var/lib/apt/lists/"*_Packages 2>/dev/null || true
  mv -T "$TMP" "$DEST"
  stage "verify and publish"
fi

# Drop chroots of older script versions that nothing has mounted (several hundred MB each).
for old in "$BASE"/root-*; do
  [ "$old" = "$DEST" ] || [ ! -d "$old" ] && continue
  has_mounts "$old" || rm -rf --one-file-system "$old"
done
ln -sfn "$DEST" "$REPO/bin/slurm-root"
echo "[slurm-root] ready in $(( $(date +%s) - t0 ))s: $REPO/bin/slurm-root -> $DEST"
echo "$DEST"
