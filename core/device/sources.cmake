# ckptscope_device: GPU inventory and memory sampling (NVML by dlopen) and the client of the LibTorch
# helper, the CUDA driver (dlopen) and what the test-load engines share (the storages a load
# places, the helper protocol, torch's caching-allocator arithmetic).
ckptscope_core_library(ckptscope_device
    SOURCES device/nvml.cpp device/sampler.cpp device/testload.cpp device/helper_process.cpp device/sha256.cpp
            device/cuda_driver.cpp device/torch_allocator.cpp device/load_selection.cpp device/helper_protocol.cpp
            device/ddp_replay.cpp device/gpu_map.cpp
    DEPS ckptscope_checkpoint)
find_package(Threads REQUIRED)
target_link_libraries(ckptscope_device PUBLIC Threads::Threads PRIVATE ${CMAKE_DL_LIBS} nlohmann_json::nlohmann_json)
