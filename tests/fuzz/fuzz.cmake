# libFuzzer targets (clang, -DCKPTSCOPE_FUZZ=ON): scripts/fuzz.sh builds and runs them.
foreach(target reader zip safetensors pickle)
    set(src ${CMAKE_CURRENT_LIST_DIR}/fuzz_${target}.cpp)
    if(EXISTS ${src} AND TARGET ckptscope_checkpoint)
        add_executable(fuzz_${target} ${src})
        target_link_libraries(fuzz_${target} PRIVATE ckptscope_checkpoint)
        target_link_options(fuzz_${target} PRIVATE -fsanitize=fuzzer)
    endif()
endforeach()
