#!/bin/sh
# A stand-in for ckptscope-torch-helper that speaks the protocol without LibTorch, so the client's
# event handling, failure paths and GPU bookkeeping are tested on any machine. FAKE_HELPER_MODE
# picks the behaviour; FAKE_HELPER_REQUEST (optional) receives the request line.
[ "$FAKE_HELPER_MODE" = noread ] && exit 4  # dies before reading, like a helper missing libtorch.so
IFS= read -r request
[ -n "$FAKE_HELPER_REQUEST" ] && printf '%s\n' "$request" > "$FAKE_HELPER_REQUEST"
start='{"event":"start","device":"DEV","total_bytes":100,"total_tensors":2,"torch_version":"fake","cuda":false}'
result='{"event":"result","device":"DEV","tensors_loaded":2,"storages_loaded":1,"bytes":100,"seconds":0.02,"gb_per_s":0.000005,"peak_bytes":PEAK,"peak_source":"SRC","skipped":[{"path":"m","reason":"no storage to place"}]}'
case "$FAKE_HELPER_MODE" in
ok)
    echo "$start" | sed 's/DEV/cpu/'
    echo 'a warning LibTorch printed on stdout'
    echo '{"event":"progress","bytes":50,"tensors":1,"total_bytes":100,"seconds":0.01}'
    echo '{"event":"progress","bytes":100,"tensors":2,"total_bytes":100,"seconds":0.02}'
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
    echo "$result" | sed 's/DEV/cuda:1/; s/PEAK/0/; s/SRC//'
    ;;
esac
