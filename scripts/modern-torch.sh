#!/usr/bin/env bash
# Makes (or reuses) a Debian testing root with today's PyTorch, transformers, accelerate and
# safetensors, the oracle of the `torch2` tests, and prints its torch version.
#   scripts/modern-torch.sh
# The root is $CKPTSCOPE_TORCH2_ROOT (default /var/cache/ckptscope/torch2-root; scripts/torch2-common.sh).
# The first run takes about 2 GB and a few minutes; later runs reuse it in seconds. It is built in a
# temporary directory beside it and renamed into place only when complete, so a run that was killed
# leaves nothing that looks ready. The mirror is the host's own Debian mirror, read from its apt
# sources. Exit 0: ready; 77: the root cannot be made here (no testing suite on the mirror, not
# root), said in one line, and the torch2 tests then report "not run"; other: it failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=torch2-common.sh
. "$here/torch2-common.sh"
# python3-zstandard: torch.distributed.checkpoint's ZStandard stream extension (_extension.py) needs it
# (or pyzstd) to write the zstd DCP sets the torch2 tests read.
packages=(python3-torch python3-transformers python3-accelerate python3-safetensors python3-zstandard)
# What ckptscope itself links at run time beyond minbase (the torch2 tests run the host's build inside
# the root): libcurl for remote inputs, libzstd for DCP's zstd items; and what the tests run inside it:
# moto's S3 server (python3-moto, with the Flask pieces its server mode needs: the S3-compatible store
# the s3:// tests read on loopback). A root made before a package was added to either list gets it on
# the next run.
runtime_packages=(libcurl4t64 libzstd1 python3-moto python3-flask python3-flask-cors)
apt_opts=(-o Acquire::Check-Valid-Until=false -o Dpkg::Use-Pty=0 -y -q --no-install-recommends)

print_version() {
    "$here/torch2-python.sh" -c 'import torch, transformers, accelerate, safetensors
print("torch", torch.__version__, "| transformers", transformers.__version__,
      "| accelerate", accelerate.__version__, "| safetensors", safetensors.__version__)'
}

# The packages an existing root lacks, installed into it (from the mirror it was made from).
top_up() {
    local missing=() p
    for p in "${packages[@]}" "${runtime_packages[@]}"; do
        chroot "$torch2_root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    if [[ $(id -u) -ne 0 ]]; then
        echo "modern-torch.sh: the root lacks ${missing[*]} and adding it needs root"
        return 77
    fi
    echo "modern-torch.sh: adding ${missing[*]} to $torch2_root" >&2
    exec 9>"$torch2_lock"
    flock 9
    local rc=0
    in_root "$torch2_root" "apt-get ${apt_opts[*]} update && apt-get ${apt_opts[*]} install ${missing[*]} && apt-get clean" >&2 ||
        rc=$?
    exec 9>&-
    return $rc
}

# in_root ROOT SCRIPT: SCRIPT run by sh inside ROOT, with /proc and /dev/shm mounted in a mount
# namespace of its own (torch2-common.sh), so nothing stays mounted under ROOT afterwards.
in_root() {
    torch2_in_namespace "$1" -- chroot "$1" env DEBIAN_FRONTEND=noninteractive /bin/sh -c "$2"
    "${torch2_ns[@]}"
}

if [[ -f $torch2_stamp ]]; then
    top_up
    print_version
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "modern-torch.sh: making the root at $torch2_root needs root (debootstrap, chroot, mount): not made"
    exit 77
fi
if ! why=$(torch2_can_unshare); then
    echo "modern-torch.sh: cannot make a mount namespace for the root ($why): not made, the torch2 tests will not run"
    exit 77
fi

# The host's mirror: the first non-security URI of its apt sources.
mirror=
if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    mirror=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' \
        /etc/apt/sources.list.d/debian.sources)
fi
if [[ -z $mirror && -f /etc/apt/sources.list ]]; then
    mirror=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
        /etc/apt/sources.list)
fi
if [[ -z $mirror ]]; then
    echo "modern-torch.sh: no Debian mirror in the host's apt sources: the torch2 root is not made"
    exit 77
fi
mirror=${mirror%/}
if ! command -v debootstrap >/dev/null; then
    apt-get install -y -qq debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
fi
if ! wget -q --spider "$mirror/dists/$torch2_suite/Release"; then
    echo "modern-torch.sh: the mirror has no Debian testing suite ($torch2_suite): the torch2 tests will not run"
    exit 77
fi

mkdir -p "$(dirname "$torch2_root")"
exec 9>"$torch2_lock"
if ! flock -n 9; then
    echo "modern-torch.sh: another run is making the root; waiting for it" >&2
    flock 9
fi
if [[ -f $torch2_stamp ]]; then # made by the run we waited for
    print_version
    exit 0
fi
# Leftovers of killed runs.
for old in "$torch2_root".build-*; do
    [[ -d $old ]] || continue
    torch2_remove "$old"
done
build=$(mktemp -d "$torch2_root.build-XXXXXX")
cleanup() {
    torch2_remove "$build"
}
trap cleanup EXIT
t0=$SECONDS
echo "modern-torch.sh: debootstrap $torch2_suite from $mirror into $build" >&2
# debootstrap mounts /proc and /sys in the target while it runs: in a namespace of its own, a killed
# run leaves none of them behind.
unshare --mount --propagation private -- \
    debootstrap --variant=minbase "$torch2_suite" "$build" "$mirror" /usr/share/debootstrap/scripts/sid >&2
echo "modern-torch.sh: installing ${packages[*]} ${runtime_packages[*]}" >&2
in_root "$build" "apt-get ${apt_opts[*]} update && apt-get ${apt_opts[*]} install ${packages[*]} ${runtime_packages[*]} && apt-get clean" >&2
date -u +"made %Y-%m-%dT%H:%M:%SZ from $mirror $torch2_suite in $((SECONDS - t0)) s" >"$build/.ckptscope-torch2-ready"
# A root left without its stamp (by hand) is moved aside rather than deleted.
if [[ -e $torch2_root ]]; then
    torch2_refuse_mounted "$torch2_root"
    mv "$torch2_root" "$torch2_root.build-stale$$"
fi
mv "$build" "$torch2_root"
trap - EXIT
exec 9>&- # torch2-python.sh takes the mounts' lock, not this one
echo "modern-torch.sh: root made in $((SECONDS - t0)) s" >&2
print_version
