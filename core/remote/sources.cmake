# Remote inputs (http(s) URLs, hf:// Hub locations) read with HTTP range requests. libcurl is a
# system package (libcurl4-openssl-dev, scripts/deps.sh).
find_package(CURL REQUIRED)
# SHA-256 and HMAC for signing S3 requests (sigv4.h): OpenSSL's libcrypto (libssl-dev), which the
# libcurl build ckptscope uses loads anyway.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
# S3's XML replies (listings, errors) are read with expat (libexpat1-dev, s3_xml.h).
find_package(EXPAT REQUIRED)
ckptscope_core_library(ckptscope_remote
    SOURCES remote/location.cpp remote/credentials.cpp remote/http_client.cpp remote/http_source.cpp
            remote/reply_parse.cpp remote/sigv4.cpp remote/s3.cpp remote/s3_xml.cpp remote/s3_upload.cpp
            remote/remote_folder.cpp remote/connections.cpp
    DEPS ckptscope_source ckptscope_util CURL::libcurl OpenSSL::Crypto EXPAT::EXPAT nlohmann_json::nlohmann_json)
# The one path from a remote input to a Checkpoint (open_remote.h),
# and from a plan to an S3 object (s3_output.h: the writers into a multipart upload).
ckptscope_core_library(ckptscope_remote_open
    SOURCES remote/open_remote.cpp remote/s3_output.cpp
    DEPS ckptscope_remote ckptscope_checkpoint ckptscope_archive ckptscope_sharded ckptscope_write
         nlohmann_json::nlohmann_json)
