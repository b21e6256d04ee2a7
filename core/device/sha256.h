// SHA-256, for checking a test-load's materialised bytes against PyTorch's (tests and the helper).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ckpt::device {

class Sha256 {
public:
    Sha256();
    void update(std::span<const std::byte> data);
    [[nodiscard]] std::string hexDigest();  // finishes; call once

private:
    void block(const std::uint8_t* p);
    std::array<std::uint32_t, 8> h_{};
    std::array<std::uint8_t, 64> buf_{};
    std::size_t bufLen_ = 0;
    std::uint64_t total_ = 0;
};

[[nodiscard]] std::string sha256Hex(std::span<const std::byte> data);

}  // namespace ckpt::device
