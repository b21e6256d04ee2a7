// What a TorchScript archive adds to a torch.save zip (docs/format.md §11): the class sources under
// `code/`, scanned for the parameter and buffer lists that data.pkl's flat attribute dicts lack.
#include "archive/zip.h"
#include "checkpoint/loaders.h"

#include <string>

namespace ckpt::detail {

namespace {

// A class source larger than this is no printer output (the largest in the corpus, detectron2's
// whole model in one file, is 0.3 MiB): it is left unread rather than inflated.
constexpr std::uint64_t kMaxSourceBytes = std::uint64_t{16} << 20;

}  // namespace

void readScriptClasses(const archive::ZipReader& zip, Checkpoint& c)
{
    const std::string prefix = zip.folder() + "/";
    std::vector<std::byte> scratch;
    std::size_t unreadable = 0;
    for (const auto& rec : zip.records()) {
        if (rec.name.compare(0, prefix.size(), prefix) != 0) {
            continue;
        }
        const std::string module = scriptModuleOfRecord(std::string_view(rec.name).substr(prefix.size()));
        if (module.empty()) {
            continue;
        }
        if (rec.size > kMaxSourceBytes) {
            ++unreadable;
            continue;
        }
        auto data = zip.data(rec, scratch);
        if (!data) {
            ++unreadable;
            continue;
        }
        parseScriptSource(module, asText(*data), c.scriptClasses);
    }
    if (unreadable > 0) {
        c.warnings.push_back(std::to_string(unreadable) +
                             " TorchScript class source(s) under code/ could not be read: their modules' parameters "
                             "and buffers are not known");
    }
}

}  // namespace ckpt::detail
