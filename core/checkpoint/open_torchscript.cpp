// What a TorchScript archive adds to a torch.save zip (docs/format.md §11): the class sources under
// `code/`, scanned for the parameter and buffer lists that data.pkl's flat attribute dicts lack.
#include "archive/zip.h"
#include "checkpoint/loaders.h"
#include "pickle/unpickler.h"

#include <string>

namespace ckpt::detail {

namespace {

// A class source larger than this is no printer output (the largest in the corpus, detectron2's
// whole model in one file, is 0.3 MiB): it is left unread rather than inflated.
constexpr std::uint64_t kMaxSourceBytes = std::uint64_t{16} << 20;
// And all of them together: 500 deflated 16 MiB sources (a few MB of file) were 8 GiB to inflate.
// A real archive's code/ is a few MiB at most.
constexpr std::uint64_t kMaxSourcesTotal = std::uint64_t{64} << 20;

}  // namespace

void readScriptClasses(const archive::ZipReader& zip, Checkpoint& c)
{
    const std::string prefix = zip.folder() + "/";
    std::vector<std::byte> scratch;
    std::size_t unreadable = 0;
    std::uint64_t inflated = 0;
    for (const auto& rec : zip.records()) {
        if (rec.name.compare(0, prefix.size(), prefix) != 0) {
            continue;
        }
        const std::string module = scriptModuleOfRecord(std::string_view(rec.name).substr(prefix.size()));
        if (module.empty()) {
            continue;
        }
        if (rec.size > kMaxSourceBytes || rec.size > kMaxSourcesTotal - inflated) {
            ++unreadable;
            continue;
        }
        inflated += rec.size;
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

void readScriptConstants(const archive::ZipReader& zip, Checkpoint& c, const MemoryBudget& budget)
{
    const archive::ZipRecord* rec = zip.find("constants.pkl");
    if (rec == nullptr) {
        return;
    }
    auto& storages = c.arena.storages;
    const std::size_t dataStorages = storages.size();
    // The unpickler shares a storage between pickles by key, and constants/0 is not data/0: the
    // data keys carry their folder while constants.pkl is read, so no constant joins one of them.
    for (auto& s : storages) {
        s.key = "data/" + s.key;
    }
    const auto restore = [&](bool keepConstants) {
        if (!keepConstants) {
            storages.resize(dataStorages);
        }
        for (std::size_t i = 0; i < storages.size(); ++i) {
            if (i < dataStorages) {
                storages[i].key = storages[i].key.view().substr(5);
            } else {
                storages[i].key = "constants/" + storages[i].key;
            }
        }
    };
    std::vector<std::byte> scratch;
    auto data =
        rec->method != 0 && rec->size > budget.limit() ? Expected<Bytes>(budget.exceeded()) : zip.data(*rec, scratch);
    if (!data) {
        restore(false);
        c.warnings.push_back("constants.pkl cannot be read (" + data.error().message + "): its tensors are not shown");
        return;
    }
    pickle::UnpickleOptions opts;
    opts.budget = budget;
    auto r = pickle::unpickle(*data, c.arena, opts);
    if (!r) {
        restore(false);
        c.warnings.push_back("constants.pkl: " + r.error().message + ": its tensors are not shown");
        return;
    }
    restore(true);
    c.scriptConstants = r->root;
    for (auto& w : r->warnings) {
        c.warnings.push_back("constants.pkl: " + std::move(w));
    }
}

}  // namespace ckpt::detail
