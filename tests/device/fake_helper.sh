#!/bin/sh
# A stand-in for ckptscope-torch-helper that speaks the protocol without LibTorch, so the client's
# event handling, failure paths and GPU bookkeeping are tested on any machine. FAKE_HELPER_MODE
# picks the behaviour; FAKE_HELPER_REQUEST (optional) receives the request line; FAKE_HELPER_PIDS
# receives the ids of the processes that a hostile mode leaves running, for the test to check
# they are gone.
[ "$FAKE_HELPER_MODE" = noread ] && exit 4  # dies before reading, like a helper missing libtorch.so
IFS= read -r request
[ -n "$FAKE_HELPER_REQUEST" ] && printf '%s\n' "$request" > "$FAKE_HELPER_REQUEST"
start='{"event":"start","device":"DEV","total_bytes":100,"total_tensors":2,"torch_version":"fake","cuda":false}'
result='{"event":"result","device":"DEV","tensors_loaded":2,"storages_loaded":1,"bytes":100,"seconds":0.02,"gb_per_s":0.000005,"peak_bytes":PEAK,"peak_source":"SRC"}'
case "$FAKE_HELPER_MODE" in
ok)
    echo "$start" | sed 's/DEV/cpu/'
    echo 'a warning LibTorch printed (the real helpers send stdout to stderr)' >&2
    echo '{"event":"progress","bytes":50,"tensors":1,"total_bytes":100,"seconds":0.01}'
    echo '{"event":"progress","bytes":100,"tensors":2,"total_bytes":100,"seconds":0.02}'
    case "$request" in *'"verify":true'*)
        echo '{"event":"verify","bytes":50,"total_bytes":100}'
        echo '{"event":"storage_check","storage":"0","bytes":100,"sha256":"'"$FAKE_HELPER_SHA"'"}'
        echo '{"event":"check","path":"model/w","storage":"0","sha256":"'"$FAKE_HELPER_SHA"'"}'
        echo '{"event":"check","path":"model/e","storage":"0","note":"expanded view"}'
        ;;
    esac
    echo '{"event":"skipped","path":"m","reason":"no storage to place"}'
    echo "$result" | sed 's/DEV/cpu/; s/PEAK/100/; s/SRC/rss-anon/'
    ;;
oom)
    echo '{"event":"error","code":"OutOfMemory","message":"out of memory on cuda:0 loading w (storage 0): it needs 2.0 GiB, 1.0 GiB free"}'
    exit 1
    ;;
crash)
    echo "terminate called after throwing an instance of 'c10::Error'" >&2
    kill -ABRT $$
    ;;
silent)
    exit 3
    ;;
hang)
    exec sleep 30
    ;;
hang_with_child)
    # Starts, then says nothing forever, with a child of its own holding the pipes.
    echo "$start" | sed 's/DEV/cpu/'
    sleep 1000 &
    echo "$$ $!" > "$FAKE_HELPER_PIDS"
    wait
    ;;
flood_line)
    echo "$start" | sed 's/DEV/cpu/'
    echo $$ > "$FAKE_HELPER_PIDS"
    exec cat /dev/zero  # one endless line
    ;;
flood_lines)
    # Valid events, forever: the silence timeout never fires, only the output cap can stop it.
    echo $$ > "$FAKE_HELPER_PIDS"
    exec yes '{"event":"progress","bytes":1,"tensors":1,"total_bytes":2,"seconds":0.1}'
    ;;
flood_stderr)
    echo "$start" | sed 's/DEV/cpu/'
    echo $$ > "$FAKE_HELPER_PIDS"
    exec yes 'warning: LibTorch has a lot to say' >&2
    ;;
garbage)
    # Everything but the protocol: text, an escape sequence and invalid UTF-8, JSON that is no
    # event, nesting deep enough to blow a recursive parser's stack.
    echo 'this is not the helper you are looking for'
    printf '\033[31mred\001\377\n'
    echo '[1,2,3]'
    echo '{"no_event":true}'
    head -c 200000 /dev/zero | tr '\0' '['
    echo
    ;;
garbage_then_hang)
    # Starts as a helper should, then says something else and stays, with a child holding the
    # pipes: it must be killed at once, not waited on for the silence timeout.
    echo "$start" | sed 's/DEV/cpu/'
    sleep 1000 &
    echo "$$ $!" > "$FAKE_HELPER_PIDS"
    printf '%s\n' "$GARBAGE_LINE"
    wait
    ;;
bad_types)
    # JSON events whose fields have the wrong types.
    echo '{"event":"start","device":"cpu","total_bytes":"lots","total_tensors":2}'
    echo "$result" | sed 's/DEV/cpu/; s/PEAK/1e300/; s/SRC/rss-anon/'
    ;;
exit3)
    # Dies without a result, leaving a child that holds its stdout and stderr open.
    echo "$start" | sed 's/DEV/cpu/'
    sleep 1000 &
    echo "$!" > "$FAKE_HELPER_PIDS"
    printf 'loading w\nfatal: \033[2Jstorage 0 vanished\n' >&2
    exit 3
    ;;
touch_other | touch_chosen)
    # Pretend to load onto cuda:1 while memory moves on cuda:0 (the DDP symptom) or on cuda:1 only.
    echo "$start" | sed 's/DEV/cuda:1/'
    sleep 0.15
    if [ "$FAKE_HELPER_MODE" = touch_other ]; then
        echo "1500000000 100000000 $$ 0 1400000000" > "$FAKE_NVML_STATE"
    else
        echo "100000000 900000000 $$ 1 800000000" > "$FAKE_NVML_STATE"
    fi
    sleep 0.15
    echo "100000000 100000000 0 0 0" > "$FAKE_NVML_STATE"
    # A CUDA build names the GPU it loaded onto by UUID, which is how the client finds its column.
    echo "$result" | sed 's/DEV/cuda:1/; s/PEAK/0/; s/SRC//; s/}$/,"device_uuid":"GPU-00000000-0000-0000-0000-000000000001"}/'
    ;;
esac
