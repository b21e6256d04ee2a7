ckptscope_core_library(ckptscope_archive
    SOURCES archive/zip_reader.cpp archive/inflate.cpp archive/zip_writer.cpp archive/crc32.cpp archive/safetensors.cpp archive/compressed.cpp archive/tar.cpp archive/zstd.cpp
    DEPS ckptscope_source ckptscope_util ZLIB::ZLIB zstd::libzstd_shared nlohmann_json::nlohmann_json)
