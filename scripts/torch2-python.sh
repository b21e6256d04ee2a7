#!/usr/bin/env bash
# Runs python3 of the PyTorch 2.x root made by scripts/modern-torch.sh, in the current directory:
#   scripts/torch2-python.sh ARGS...
# The repository, /tmp, $TMPDIR, the current directory and each directory in
# $CKPTSCOPE_TORCH2_BIND (colon-separated) are bind-mounted at the same path inside the root, so a
# path means the same inside and out, in a mount namespace of this run's own: no mount outlives it
# or is seen from the host. Torch runs with USE_LIBUV=0 (Debian builds it without libuv),
# offline, one thread per process unless OMP_NUM_THREADS says otherwise.
# Exit 77 (ctest's "skipped") when the root is not ready, or when this host cannot make a mount
# namespace (said in one line).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=torch2-common.sh
. "$here/torch2-common.sh"
if [[ ! -f $torch2_stamp ]]; then
    echo "torch2-python.sh: no PyTorch 2.x root at $torch2_root (run scripts/modern-torch.sh): not run"
    exit 77
fi
if ! why=$(torch2_can_unshare); then
    echo "torch2-python.sh: cannot make a mount namespace for the root ($why): not run"
    exit 77
fi
binds=("$(dirname "$here")" /tmp "${TMPDIR:-/tmp}" "$PWD")
IFS=: read -r -a extra <<<"${CKPTSCOPE_TORCH2_BIND:-}"
binds+=("${extra[@]}")
# The binds live in a mount namespace of this run alone (torch2-common.sh): they vanish with it.
torch2_in_namespace "$torch2_root" "${binds[@]}" -- \
    chroot "$torch2_root" /usr/bin/env -u PYTHONPATH -u PYTHONHOME \
    PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 USE_LIBUV=0 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME=/tmp/.ckptscope-torch2-hf \
    OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" \
    /bin/sh -c 'cd "$1" && shift && exec python3 "$@"' sh "$PWD" "$@"
exec "${torch2_ns[@]}"
