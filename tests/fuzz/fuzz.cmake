# libFuzzer targets (clang, -DCKPTSCOPE_FUZZ=ON): scripts/fuzz.sh builds and runs them.
foreach(pair "reader:ckptscope_checkpoint" "zip:ckptscope_archive" "safetensors:ckptscope_archive"
             "pickle:ckptscope_pickle" "check:ckptscope_diagnose" "dcp:ckptscope_sharded"
             "hf_index:ckptscope_sharded" "zero:ckptscope_sharded" "remote:ckptscope_remote_open"
             "s3_xml:ckptscope_remote")
    string(REPLACE ":" ";" pair "${pair}")
    list(GET pair 0 target)
    list(GET pair 1 lib)
    add_executable(fuzz_${target} ${CMAKE_CURRENT_LIST_DIR}/fuzz_${target}.cpp)
    target_link_libraries(fuzz_${target} PRIVATE ${lib})
    target_link_options(fuzz_${target} PRIVATE -fsanitize=fuzzer)
endforeach()
target_link_libraries(fuzz_check PRIVATE ckptscope_transform)
