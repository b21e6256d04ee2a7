# Options are their own library: diagnose builds fixes from them without depending on the planner.
ckptscope_core_library(ckptscope_transform_options
    SOURCES transform/options.cpp transform/allowlist.cpp
    DEPS ckptscope_util nlohmann_json::nlohmann_json)
ckptscope_core_library(ckptscope_transform
    SOURCES
        transform/transform.cpp
        transform/select.cpp
        transform/unwrap.cpp
        transform/weights_only.cpp
        transform/prefix.cpp
        transform/storages.cpp
        transform/dequantize.cpp
        transform/plan_summary.cpp
    DEPS ckptscope_checkpoint ckptscope_transform_options)
