# ckptscope_diagnose: rules over a Checkpoint -> Findings (diagnose.h), value scans (values.h) and
# the --against comparison (against.h).
# A finding's fix is a transform::Options, hence the options library.
ckptscope_core_library(ckptscope_diagnose
    SOURCES
        diagnose/diagnose.cpp
        diagnose/report.cpp
        diagnose/safety.cpp
        diagnose/rules_prefix.cpp
        diagnose/rules_device.cpp
        diagnose/rules_pickle.cpp
        diagnose/rules_storage.cpp
        diagnose/rules_tensors.cpp
        diagnose/values.cpp
        diagnose/against.cpp
        diagnose/reference.cpp
    DEPS ckptscope_checkpoint ckptscope_transform_options nlohmann_json::nlohmann_json)
# The value scans are the hot loop of `check --values` (>= 1 GB/s): let GCC vectorise them.
set_source_files_properties(diagnose/values.cpp PROPERTIES COMPILE_OPTIONS "-O3")
