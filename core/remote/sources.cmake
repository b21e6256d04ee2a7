# Remote inputs (http(s) URLs, hf:// Hub locations) read with HTTP range requests. libcurl is a
# system package (libcurl4-openssl-dev, scripts/deps.sh).
find_package(CURL REQUIRED)
ckptscope_core_library(ckptscope_remote
    SOURCES remote/location.cpp remote/credentials.cpp remote/http_client.cpp remote/http_source.cpp
            remote/reply_parse.cpp
    DEPS ckptscope_source ckptscope_util CURL::libcurl nlohmann_json::nlohmann_json)
# The one path from a remote input to a Checkpoint (open_remote.h).
ckptscope_core_library(ckptscope_remote_open
    SOURCES remote/open_remote.cpp
    DEPS ckptscope_remote ckptscope_checkpoint ckptscope_archive ckptscope_sharded nlohmann_json::nlohmann_json)
