# ckptscope_diff: two checkpoints matched key by key (wrapper prefixes aligned, moved tensors found
# by their bytes) and compared by value on every core (diff.h); the text, JSON and summary reports.
# The prefix strip is transform's own (Options::renamedKey), hence the options library; a side may
# be a Hugging Face sharded set, hence sharded.
ckptscope_core_library(ckptscope_diff
    SOURCES
        diff/diff.cpp
        diff/keys.cpp
        diff/elements.cpp
        diff/report.cpp
        diff/side.cpp
    DEPS ckptscope_checkpoint ckptscope_sharded ckptscope_transform_options nlohmann_json::nlohmann_json)
# The block comparison is the hot loop (>= 2 GB/s): let GCC vectorise it.
set_source_files_properties(diff/diff.cpp diff/elements.cpp PROPERTIES COMPILE_OPTIONS "-O3")
