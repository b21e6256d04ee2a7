// The per-tensor record line the oracle's `torch` command writes from torch.load, built here from
// the unpickled tree, walking containers in the same order.
#pragma once

#include "pickle/value.h"

#include <map>
#include <string>
#include <vector>

namespace pickletest {

using namespace ckpt::pickle;

inline std::string joinDims(const std::vector<std::int64_t>& d)
{
    std::string s;
    for (std::size_t n = 0; n < d.size(); ++n) {
        s += (n != 0 ? "," : "") + std::to_string(d[n]);
    }
    return s;
}

inline std::string formName(TensorForm f)
{
    switch (f) {
    case TensorForm::Strided:
        return "Strided";
    case TensorForm::Quantized:
        return "Quantized";
    case TensorForm::Sparse:
        return "Sparse";
    case TensorForm::Meta:
        return "Meta";
    case TensorForm::Wrapper:
        return "Wrapper";
    case TensorForm::DeviceFromCpu:
        return "DeviceFromCpu";
    case TensorForm::Nested:
        return "Nested";
    }
    return "?";
}

class TensorWalker {
public:
    explicit TensorWalker(const Arena& a) : a_(a) {}
    std::vector<std::string> records;

    void walk(ValueId id, const std::string& path)
    {
        const Value& v = a_[id];
        switch (v.kind) {
        case Kind::Tensor:
            records.push_back(record(tensorOf(a_, id), path));
            break;
        case Kind::Dict:
            for (std::size_t n = 0; n + 1 < v.items.size(); n += 2) {
                walk(v.items[n + 1], join(path, keyText(a_, v.items[n])));
            }
            break;
        case Kind::List:
        case Kind::Tuple:
            for (std::size_t n = 0; n < v.items.size(); ++n) {
                walk(v.items[n], join(path, std::to_string(n)));
            }
            break;
        case Kind::Object: {
            NumpyInfo np;
            const ObjectInfo& o = objectOf(a_, id);
            if (!decodeNumpy(a_, id, np) && o.state.valid() && a_[o.state].kind == Kind::Dict) {
                walk(o.state, path);
            }
            break;
        }
        default:
            break;
        }
    }

private:
    static std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "/" + b; }

    std::string record(const TensorInfo& t, const std::string& path)
    {
        const bool rg = t.isParameter ? t.parameterRequiresGrad : t.requiresGrad;
        std::string r = path + "|" + formName(t.form) + "|" + (t.isParameter ? "param" : "tensor") + "|" +
                        std::string(ckpt::dtypeName(t.dtype)) + "|" + joinDims(t.shape) + "|" + (rg ? "rg" : "-");
        if (t.form == TensorForm::Strided || t.form == TensorForm::Quantized) {
            const StorageRef& s = a_.storages.at(static_cast<std::size_t>(a_[t.storage].i));
            auto [it, inserted] = groups_.try_emplace(s.key, static_cast<int>(groups_.size()));
            r += "|" + joinDims(t.stride) + "|" + std::to_string(t.storageOffset) + "|" + std::to_string(s.numel) +
                 "|" + s.location.substr(0, s.location.find(':')) + "|g" + std::to_string(it->second);
        }
        return r;
    }

    const Arena& a_;
    std::map<std::string, int> groups_;
};

}  // namespace pickletest
