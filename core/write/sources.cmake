ckptscope_core_library(ckptscope_write
    SOURCES write/write.cpp write/output_file.cpp write/model_config_file.cpp write/targets.cpp write/torch_writer.cpp write/safetensors_writer.cpp
    DEPS ckptscope_transform ckptscope_archive ckptscope_pickle ckptscope_checkpoint)
