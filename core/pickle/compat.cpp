#include "pickle/compat.h"

#include <iterator>
#include <string_view>

namespace ckpt::pickle::detail {
namespace {

struct ModuleMap {
    std::string_view from;
    std::string_view to;
};
struct NameMap {
    std::string_view fromModule;
    std::string_view fromName;
    std::string_view toModule;
    std::string_view toName;
};

#include "pickle/compat_names.inc"

template <class Table>
void apply(const Table& names, const ModuleMap* modulesBegin, const ModuleMap* modulesEnd, std::string& module,
           std::string& name)
{
    for (const NameMap& m : names) {
        if (m.fromModule == module && m.fromName == name) {
            module = m.toModule;
            name = m.toName;
            return;
        }
    }
    for (const ModuleMap* m = modulesBegin; m != modulesEnd; ++m) {
        if (m->from == module) {
            module = m->to;
            return;
        }
    }
}

}  // namespace

void mapToPython3(std::string& module, std::string& name, int protocol)
{
    if (protocol < 3) {
        apply(kNameMapping, std::begin(kImportMapping), std::end(kImportMapping), module, name);
    }
    if (module == "torch.tensor") {
        module = "torch._tensor";
    }
}

void mapToPython2(std::string& module, std::string& name)
{
    apply(kReverseNameMapping, std::begin(kReverseImportMapping), std::end(kReverseImportMapping), module, name);
}

}  // namespace ckpt::pickle::detail
