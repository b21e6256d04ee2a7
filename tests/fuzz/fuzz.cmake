# libFuzzer targets (clang, -DCKPTSCOPE_FUZZ=ON): scripts/fuzz.sh builds and runs them.
foreach(pair "reader:ckptscope_checkpoint" "zip:ckptscope_archive" "safetensors:ckptscope_archive"
             "pickle:ckptscope_pickle" "check:ckptscope_diagnose" "dcp:ckptscope_sharded"
             "hf_index:ckptscope_sharded" "zero:ckptscope_sharded" "remote:ckptscope_remote_open"
             "s3_xml:ckptscope_remote" "model_config:ckptscope_checkpoint")
    string(REPLACE ":" ";" pair "${pair}")
    list(GET pair 0 target)
    list(GET pair 1 lib)
    add_executable(fuzz_${target} ${CMAKE_CURRENT_LIST_DIR}/fuzz_${target}.cpp)
    target_link_libraries(fuzz_${target} PRIVATE ${lib})
    target_link_options(fuzz_${target} PRIVATE -fsanitize=fuzzer)
endforeach()
target_link_libraries(fuzz_check PRIVATE ckptscope_transform)
# DCP's newer layouts: one source, a template folder each (tests/fuzz/dcp_templates, real PyTorch 2.x
# output) whose data file is the input.
foreach(layout safetensors zstd)
    add_executable(fuzz_dcp_${layout} ${CMAKE_CURRENT_LIST_DIR}/fuzz_dcp_layout.cpp)
    target_link_libraries(fuzz_dcp_${layout} PRIVATE ckptscope_sharded ckptscope_remote)
    target_compile_definitions(fuzz_dcp_${layout}
                               PRIVATE CKPTSCOPE_FUZZ_TEMPLATE="${CMAKE_CURRENT_LIST_DIR}/dcp_templates/${layout}")
    target_link_options(fuzz_dcp_${layout} PRIVATE -fsanitize=fuzzer)
endforeach()
