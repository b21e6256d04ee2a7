# ckptscope_device: GPU inventory and memory sampling (NVML by dlopen) and the client of the LibTorch
# helper. Depends on util only: the torch.load placement takes the checkpoint's bytes-by-location.
ckptscope_core_library(ckptscope_device
    SOURCES device/nvml.cpp device/sampler.cpp device/testload.cpp device/sha256.cpp
    DEPS ckptscope_util)
find_package(Threads REQUIRED)
target_link_libraries(ckptscope_device PUBLIC Threads::Threads PRIVATE ${CMAKE_DL_LIBS} nlohmann_json::nlohmann_json)
