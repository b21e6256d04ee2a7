# Sourced by modern-torch.sh and torch2-python.sh: where the PyTorch 2.x root lives and how it is
# prepared for a run. Not a command of its own.
#   CKPTSCOPE_TORCH2_ROOT   the root (default /var/cache/ckptscope/torch2-root)
#   CKPTSCOPE_TORCH2_SUITE  the Debian suite it is made from (default forky, today's testing)
torch2_root=${CKPTSCOPE_TORCH2_ROOT:-/var/cache/ckptscope/torch2-root}
torch2_suite=${CKPTSCOPE_TORCH2_SUITE:-forky}
# The stamp is written last, after every package is installed; a root without it is not used.
torch2_stamp=$torch2_root/.ckptscope-torch2-ready
torch2_lock=$(dirname "$torch2_root")/.$(basename "$torch2_root").lock

# torch2_mounts ROOT DIR...: /proc, a private /dev/shm (mp.spawn's shared memory) and each host DIR
# bind-mounted at the same path inside ROOT, each only once (a path means the same inside and out).
torch2_mounts() {
    local root=$1 dir
    shift
    mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
    mkdir -p "$root/dev/shm"
    mountpoint -q "$root/dev/shm" || mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
    # The sanitizer runtimes of the host's compiler, for an instrumented ckptscope (the asan preset,
    # scripts/test-asan.sh) run inside the root: testing's own would be another GCC's, and minbase
    # has none. Copied only where the root lacks that soname, so no package of the root is shadowed.
    local lib
    for lib in /usr/lib/x86_64-linux-gnu/libasan.so.8* /usr/lib/x86_64-linux-gnu/libubsan.so.1*; do
        [[ -e $lib && ! -e $root$lib ]] && cp -a "$lib" "$root$lib"
    done
    for dir in "$@"; do
        [[ -d $dir ]] || continue
        dir=$(realpath "$dir")
        [[ $dir == / ]] && continue
        mkdir -p "$root$dir"
        mountpoint -q "$root$dir" || mount --bind "$dir" "$root$dir"
    done
}

# torch2_unmount ROOT: every mount under ROOT, deepest first.
torch2_unmount() {
    local root m
    root=$(realpath "$1")
    findmnt -rn -o TARGET | awk -v r="$root" 'index($0, r "/") == 1' | sort -r | while read -r m; do
        umount -l "$m" || true
    done
}
