ckptscope_core_library(ckptscope_checkpoint
    SOURCES checkpoint/checkpoint.cpp checkpoint/open.cpp checkpoint/open_tar.cpp checkpoint/index.cpp checkpoint/tensor_bytes.cpp checkpoint/layout.cpp
        checkpoint/state_dict.cpp checkpoint/dtensor.cpp checkpoint/script_classes.cpp checkpoint/open_torchscript.cpp checkpoint/open_export.cpp checkpoint/script_state_dict.cpp checkpoint/model_folder.cpp checkpoint/source_storages.cpp
        checkpoint/file_formats.cpp checkpoint/open_zip.cpp checkpoint/open_legacy.cpp checkpoint/open_safetensors.cpp checkpoint/block_quant.cpp
    DEPS ckptscope_archive ckptscope_pickle nlohmann_json::nlohmann_json)
