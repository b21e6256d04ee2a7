// What torch's weights-only unpickler accepts (docs/format.md §5.2/§5.3), and which
// globals run code when an ordinary unpickler meets them. Shared by the rules and the window.
#pragma once

#include <bitset>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::diagnose {

// True when `qualified` (`module.name`, Python 3 names) is in torch.load(weights_only=True)'s
// default allowlist (transform/allowlist.h: the one convert --weights-only uses).
[[nodiscard]] bool isWeightsOnlyAllowed(std::string_view qualified);

// Why a global is dangerous to unpickle ("runs a shell command"), or nullopt when it is not one
// we know to execute code, touch files, import modules or reach the network.
[[nodiscard]] std::optional<std::string_view> unsafeReason(std::string_view qualified);

// Opcodes present in a pickle that the weights-only unpickler refuses ("Unsupported operand N").
struct RefusedOpcode {
    int code = 0;
    std::string_view name;
};
[[nodiscard]] std::vector<RefusedOpcode> refusedOpcodes(const std::bitset<256>& seen);

// The pickle opcode's name as pickletools spells it (`FRAME`), "opcode 0xNN" when unknown.
[[nodiscard]] std::string opcodeName(int code);

}  // namespace ckpt::diagnose
