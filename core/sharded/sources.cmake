# ckptscope_sharded: multi-file checkpoints (sharded.h): detection of every format docs/format.md §16.1
# lists, the Hugging Face sharded-set view and its consolidation into one torch zip.
ckptscope_core_library(ckptscope_sharded
    SOURCES sharded/detect.cpp sharded/hf_set.cpp sharded/consolidate.cpp sharded/zero.cpp sharded/split.cpp
            sharded/listing.cpp sharded/dcp.cpp sharded/fsdp.cpp
            sharded/out_dir.cpp sharded/dcp_write.cpp sharded/unsafe.cpp sharded/members.cpp
            sharded/set_view.cpp sharded/box_view.cpp sharded/formats.cpp sharded/set_check.cpp
            sharded/open_control.cpp
    DEPS ckptscope_checkpoint ckptscope_diagnose ckptscope_write ckptscope_archive ckptscope_pickle nlohmann_json::nlohmann_json)
