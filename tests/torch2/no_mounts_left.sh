#!/usr/bin/env bash
# The PyTorch 2.x root never keeps anything mounted (scripts/torch2-common.sh): each torch2-python.sh
# run binds the checkout, /tmp and its folders in a mount namespace of its own. Run by ctest after
# every other torch2 test (FIXTURES_CLEANUP), it checks:
#   1. nothing is mounted under the root now, after the suite;
#   2. a run sees the checkout inside the root while the host sees no mount, and a kill -9 of it
#      leaves none behind;
#   3. a host that cannot make a mount namespace gets one line and exit 77 (ctest's "not run"),
#      and nothing mounted;
#   4. modern-torch.sh's deletion of a root (torch2_remove) refuses one with a bind under it, in
#      one line, and deletes nothing through the bind; with nothing mounted it deletes the root.
# Exit 77 when there is no root.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../../scripts/torch2-common.sh
. "$root/scripts/torch2-common.sh"
[[ -f $torch2_stamp ]] || { echo "no PyTorch 2.x root at $torch2_root: not run"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
left() { torch2_mounted "$torch2_root"; }

[[ -z $(left) ]] || fail "after the suite, mounted under $torch2_root: $(left | tr '\n' ' ')"
echo "ok: nothing mounted under $torch2_root after the suite"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$root/scripts/torch2-python.sh" -c "
import os, sys, time
print(os.path.isfile('$root/scripts/torch2-common.sh'), flush=True)
open('$work/started', 'w').close()
time.sleep(60)" >"$work/out" 2>&1 &
pid=$!
for _ in $(seq 300); do [[ -e $work/started ]] && break; sleep 0.1; done
[[ -e $work/started ]] || fail "the run inside the root never started: $(cat "$work/out")"
[[ $(head -n1 "$work/out") == True ]] || fail "the checkout is not visible inside the root: $(cat "$work/out")"
[[ -z $(left) ]] || fail "a running torch2-python.sh shows its mounts to the host: $(left | tr '\n' ' ')"
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
sleep 0.2
[[ -z $(left) ]] || fail "kill -9 left mounted under $torch2_root: $(left | tr '\n' ' ')"
echo "ok: a run's binds are visible inside it only, and gone after kill -9"

# No mount namespace: an unshare that fails, first on PATH.
mkdir "$work/bin"
printf '#!/bin/sh\necho "unshare: unshare failed: Operation not permitted" >&2\nexit 1\n' >"$work/bin/unshare"
chmod +x "$work/bin/unshare"
rc=0
PATH="$work/bin:$PATH" "$root/scripts/torch2-python.sh" -c 'print(1)' >"$work/out" 2>&1 || rc=$?
[[ $rc -eq 77 ]] || fail "without a mount namespace torch2-python.sh exited $rc, not 77: $(cat "$work/out")"
[[ $(wc -l <"$work/out") -eq 1 ]] || fail "without a mount namespace it said more than one line: $(cat "$work/out")"
grep -q "mount namespace" "$work/out" || fail "the line does not say why: $(cat "$work/out")"
[[ -z $(left) ]] || fail "the refused run left mounts"
echo "ok: without a mount namespace, one line and exit 77: $(cat "$work/out")"

# A root with a folder bound under it, as the old scripts left /tmp and the checkout (in a namespace
# of this test's own, so the host never sees it): rm -rf --one-file-system alone deletes what the
# bind shows, since a bind of the same filesystem is no other device.
mkdir -p "$work/victim" "$work/old-root/tmp"
echo keep >"$work/victim/keep"
# shellcheck disable=SC2016 # expanded by the inner shell
unshare --mount --propagation private -- bash -c '
    . "$1"
    mount --bind "$2/victim" "$2/old-root/tmp"
    rc=0
    (torch2_remove "$2/old-root") >"$2/refused" 2>&1 || rc=$?
    echo "$rc" >"$2/refused-rc"' torch2-remove "$root/scripts/torch2-common.sh" "$work"
[[ -f $work/victim/keep ]] || fail "deleting a root with a bind under it deleted the bound folder's files"
[[ $(cat "$work/refused-rc") -eq 1 ]] || fail "a root with a bind under it: exit $(cat "$work/refused-rc"), not 1"
if [[ $(wc -l <"$work/refused") -ne 1 ]] || ! grep -q "refusing to delete" "$work/refused"; then
    fail "a root with a bind under it, not refused in one line: $(cat "$work/refused")"
fi
[[ -d $work/old-root ]] || fail "the refused root was deleted"
(torch2_remove "$work/old-root") || fail "a root with nothing mounted under it was not deleted"
[[ ! -e $work/old-root ]] || fail "a root with nothing mounted under it is still there"
echo "ok: a root with a bind under it is not deleted: $(cat "$work/refused")"
