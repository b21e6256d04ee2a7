# ckptscope_diagnose: rules over a Checkpoint -> Findings (diagnose.h), value scans (values.h) and
# the --against comparison (against.h).
#
# Declared with a deferred call: core/CMakeLists.txt includes the stages in data-flow order and
# transform/ (which declares ckptscope_transform_options, the type of a finding's fix) comes after
# diagnose/, so at include time that target does not exist yet and the stage would be skipped.
# The deferred call runs when core/ finishes, after every stage has declared its library.
cmake_language(DEFER CALL ckptscope_core_library ckptscope_diagnose
    SOURCES
        diagnose/diagnose.cpp
        diagnose/report.cpp
        diagnose/safety.cpp
        diagnose/rules_prefix.cpp
        diagnose/rules_device.cpp
        diagnose/rules_pickle.cpp
        diagnose/rules_storage.cpp
        diagnose/values.cpp
        diagnose/against.cpp
    DEPS ckptscope_checkpoint ckptscope_transform_options nlohmann_json::nlohmann_json)
# The value scans are the hot loop of `check --values` (>= 1 GB/s): let GCC vectorise them.
set_source_files_properties(diagnose/values.cpp PROPERTIES COMPILE_OPTIONS "-O3")
