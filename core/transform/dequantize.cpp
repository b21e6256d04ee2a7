// --dequantize DTYPE: every block-quantized FP8 weight (checkpoint/block_quant.h) becomes a tensor
// of DTYPE holding `float(weight[i, j]) * scale[i / bm, j / bn]`, computed in float32 and rounded to
// nearest even as torch's `.to(dtype)` rounds (c10's BFloat16 and Half conversions), which is what
// transformers' Fp8Dequantize computes (`(quantized.to(float32) * scales).to(output_dtype)`); its
// scale is left out. The values are computed as the output is written (ComputedBytes), a chunk of
// the weight at a time: memory is one chunk of input and its output, whatever the tensor's size.
#include "checkpoint/block_quant.h"
#include "pickle/tensor_record.h"
#include "transform/plan_builder.h"
#include "util/mapped_pages.h"
#include "util/shape_text.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

namespace ckpt::transform::detail {

namespace {

// c10::detail::round_to_nearest_even (c10/util/BFloat16.h); a NaN becomes the canonical quiet NaN.
std::uint16_t toBFloat16(float f)
{
    if (std::isnan(f)) {
        return 0x7FC0;
    }
    const auto u = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t bias = ((u >> 16U) & 1U) + 0x7FFFU;
    return static_cast<std::uint16_t>((u + bias) >> 16U);
}

// c10's fp16_ieee_from_fp32_value (c10/util/Half.h, from the FP16 library): rounds to nearest even
// through float arithmetic, subnormals and overflow to infinity included; NaN becomes 0x7E00.
std::uint16_t toHalf(float f)
{
    constexpr float kScaleToInf = 0x1.0p+112F;
    constexpr float kScaleToZero = 0x1.0p-110F;
    float base = (std::fabs(f) * kScaleToInf) * kScaleToZero;
    const auto w = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t shl1 = w + w;
    const std::uint32_t sign = w & 0x80000000U;
    std::uint32_t bias = shl1 & 0xFF000000U;
    if (bias < 0x71000000U) {
        bias = 0x71000000U;
    }
    base = std::bit_cast<float>((bias >> 1U) + 0x07800000U) + base;
    const auto bits = std::bit_cast<std::uint32_t>(base);
    const std::uint32_t expBits = (bits >> 13U) & 0x00007C00U;
    const std::uint32_t mantissa = bits & 0x00000FFFU;
    const std::uint32_t nonsign = expBits + mantissa;
    return static_cast<std::uint16_t>((sign >> 16U) | (shl1 > 0xFF000000U ? 0x7E00U : nonsign));
}

float scaleValue(DType t, Bytes b)
{
    switch (t) {
    case DType::Float32: {
        float f = 0;
        std::memcpy(&f, b.data(), sizeof f);
        return f;
    }
    case DType::BFloat16:
        return bfloat16ToFloat(static_cast<std::uint16_t>(loadLE(b, 0, 2)));
    case DType::Float16:
        return static_cast<float>(halfToDouble(static_cast<std::uint16_t>(loadLE(b, 0, 2))));
    default:  // float8_e8m0fnu: a power of two
        return static_cast<float>(float8ToDouble(t, std::to_integer<std::uint8_t>(b[0])));
    }
}

class Dequantized final : public ComputedBytes {
public:
    struct Part {
        StorageIndex storage;
        std::uint64_t byteOffset = 0;
        DType dtype = DType::Unknown;
    };
    Dequantized(Part weight, Part scale, std::vector<std::int64_t> shape, std::vector<std::int64_t> block, DType out)
        : weight_(weight), scale_(scale), shape_(std::move(shape)), block_(std::move(block)), out_(out)
    {
        rows_ = shape_[shape_.size() - 2];
        cols_ = shape_.back();
        blockRows_ = (rows_ + block_[0] - 1) / block_[0];
        blockCols_ = (cols_ + block_[1] - 1) / block_[1];
        numel_ = 1;
        for (const auto d : shape_) {
            numel_ *= static_cast<std::uint64_t>(d);
        }
    }

    [[nodiscard]] std::uint64_t size() const override { return numel_ * elementSize(out_); }

    Expected<void> stream(const Checkpoint& in, const std::function<bool(Bytes)>& sink) const override
    {
        auto scales = readScales(in);
        if (!scales) {
            return scales.error();
        }
        std::array<float, 256> lut{};
        for (std::size_t b = 0; b < lut.size(); ++b) {
            lut[b] = static_cast<float>(float8ToDouble(weight_.dtype, static_cast<std::uint8_t>(b)));
        }
        const std::uint32_t outSize = elementSize(out_);
        std::vector<std::byte> out;
        std::uint64_t at = 0;  // elements of the weight done
        Expected<void> sent;
        const auto step = [&](Bytes piece) {
            out.resize(piece.size() * outSize);
            convert(piece, at, *scales, lut, out);
            at += piece.size();
            if (!sink(out)) {
                sent = makeError(ErrorCode::Cancelled, "cancelled");
                return false;
            }
            return true;
        };
        // Bytes that lie in a file mapping (the input's, or a set member's) are read from it a piece
        // at a time, each piece's pages given back once converted: resident memory stays a piece of
        // the input and its output, however large the tensor or the file.
        if (const auto mapped = mappedBytes(in)) {
            for (std::uint64_t from = 0; from < mapped->bytes.size() && sent; from += kChunk) {
                const Bytes piece = mapped->bytes.subspan(
                    static_cast<std::size_t>(from),
                    static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, mapped->bytes.size() - from)));
                const bool goOn = step(piece);
                releaseMappedPages(*mapped->file, piece);
                if (!goOn) {
                    break;
                }
            }
            return sent;
        }
        auto read = in.streamStorage(weight_.storage, weight_.byteOffset, numel_, step, kChunk);
        if (!sent) {
            return sent;
        }
        return read;
    }

private:
    static constexpr std::size_t kChunk = std::size_t{4} << 20;

    struct Mapped {
        Bytes bytes;
        const MappedFile* file = nullptr;
        std::shared_ptr<const Checkpoint> member;  // keeps a set member's mapping open
    };
    // The weight's bytes as a span of a file mapping, when they are one: a stored record of the
    // input, or a set's storage whole in one member (StorageSource::fileSpan).
    [[nodiscard]] std::optional<Mapped> mappedBytes(const Checkpoint& in) const
    {
        const StorageEntry& s = in.storages[weight_.storage];
        if (s.inMapping() && in.file && s.fileOffset + weight_.byteOffset + numel_ <= in.bytes.size()) {
            return Mapped{in.bytes.subspan(static_cast<std::size_t>(s.fileOffset + weight_.byteOffset),
                                           static_cast<std::size_t>(numel_)),
                          in.file.get(), nullptr};
        }
        if (!s.assembled || !in.source) {
            return std::nullopt;
        }
        auto span = in.source->fileSpan(weight_.storage);
        if (!span || !span->member || !span->member->file ||
            span->offset + weight_.byteOffset + numel_ > span->member->bytes.size()) {
            return std::nullopt;
        }
        return Mapped{span->member->bytes.subspan(static_cast<std::size_t>(span->offset + weight_.byteOffset),
                                                  static_cast<std::size_t>(numel_)),
                      span->member->file.get(), span->member};
    }

    Expected<std::vector<float>> readScales(const Checkpoint& in) const
    {
        auto count = static_cast<std::uint64_t>(blockRows_ * blockCols_);
        for (std::size_t d = 0; d + 2 < shape_.size(); ++d) {
            count *= static_cast<std::uint64_t>(shape_[d]);
        }
        const std::uint32_t es = elementSize(scale_.dtype);
        std::vector<float> scales;
        scales.reserve(count);
        std::vector<std::byte> carry;  // an element split between two pieces
        auto read = in.streamStorage(scale_.storage, scale_.byteOffset, count * es, [&](Bytes piece) {
            for (const std::byte b : piece) {
                carry.push_back(b);
                if (carry.size() == es) {
                    scales.push_back(scaleValue(scale_.dtype, carry));
                    carry.clear();
                }
            }
            return true;
        });
        if (!read) {
            return read.error();
        }
        return scales;
    }

    // Elements [at, at + piece.size()) of the weight, in C order, into `out`.
    void convert(Bytes piece, std::uint64_t at, const std::vector<float>& scales, const std::array<float, 256>& lut,
                 std::vector<std::byte>& out) const
    {
        const auto cols = static_cast<std::uint64_t>(cols_);
        const auto bn = static_cast<std::uint64_t>(block_[1]);
        std::size_t i = 0;
        while (i < piece.size()) {
            const std::uint64_t e = at + i;
            const std::uint64_t row = e / cols;  // over the leading dimensions too
            std::uint64_t col = e % cols;
            const std::uint64_t matrix = row / static_cast<std::uint64_t>(rows_);
            const std::uint64_t blockRow =
                (row % static_cast<std::uint64_t>(rows_)) / static_cast<std::uint64_t>(block_[0]);
            const float* rowScales = scales.data() + (matrix * static_cast<std::uint64_t>(blockRows_) + blockRow) *
                                                         static_cast<std::uint64_t>(blockCols_);
            const std::size_t rowEnd =
                i + static_cast<std::size_t>(std::min<std::uint64_t>(cols - col, piece.size() - i));
            while (i < rowEnd) {
                const float s = rowScales[col / bn];
                const std::size_t end =
                    i + static_cast<std::size_t>(std::min<std::uint64_t>(bn - col % bn, rowEnd - i));
                write(piece, i, end, s, lut, out);
                col += end - i;
                i = end;
            }
        }
    }

    // Elements [from, to) of `piece`, each float32(weight) x s, encoded as the output dtype.
    template <class Out, class Encode>
    static void encodeRun(Bytes piece, std::size_t from, std::size_t to, float s, const std::array<float, 256>& lut,
                          std::vector<std::byte>& out, Encode encode)
    {
        const auto* q = reinterpret_cast<const std::uint8_t*>(piece.data());
        auto* o = reinterpret_cast<Out*>(out.data());
        for (std::size_t k = from; k < to; ++k) {
            o[k] = encode(lut[q[k]] * s);
        }
    }

    void write(Bytes piece, std::size_t from, std::size_t to, float s, const std::array<float, 256>& lut,
               std::vector<std::byte>& out) const
    {
        switch (out_) {
        case DType::BFloat16:
            encodeRun<std::uint16_t>(piece, from, to, s, lut, out, [](float v) { return toBFloat16(v); });
            break;
        case DType::Float16:
            encodeRun<std::uint16_t>(piece, from, to, s, lut, out, [](float v) { return toHalf(v); });
            break;
        default:
            encodeRun<float>(piece, from, to, s, lut, out, [](float v) { return v; });
            break;
        }
    }

    Part weight_;
    Part scale_;
    std::vector<std::int64_t> shape_;
    std::vector<std::int64_t> block_;
    DType out_;
    std::int64_t rows_ = 0;
    std::int64_t cols_ = 0;
    std::int64_t blockRows_ = 0;
    std::int64_t blockCols_ = 0;
    std::uint64_t numel_ = 0;
};

}  // namespace

Expected<void> dequantize(Builder& b)
{
    if (!b.opts.dequantize) {
        return {};
    }
    const DType out = *b.opts.dequantize;
    if (out != DType::BFloat16 && out != DType::Float16 && out != DType::Float32) {
        return makeError(ErrorCode::Usage,
                         "--dequantize writes bfloat16, float16 or float32, not " + std::string(dtypeName(out)));
    }
    const BlockQuantization q = blockQuantization(b.in);
    if (q.weights.empty()) {
        return makeError(ErrorCode::Usage,
                         "--dequantize: the checkpoint holds no block-quantized FP8 weight (a float8 `weight` beside "
                         "its `weight_scale_inv`) to dequantize");
    }
    for (const auto& w : q.weights) {
        if (!w.ok()) {
            return makeError(ErrorCode::Corrupt, "--dequantize: '" + std::string(b.in.tensors[w.weight].path) +
                                                     "' cannot be dequantized: " + w.problem);
        }
    }
    pickle::Arena& a = b.arena();
    // Scales go from their dicts, later rows first so the rows still to go keep their places.
    std::vector<const BlockScale*> byRow;
    for (const auto& w : q.weights) {
        byRow.push_back(&w);
    }
    std::stable_sort(byRow.begin(), byRow.end(), [&](const BlockScale* x, const BlockScale* y) {
        return b.in.rowOf(b.in.tensors[x->scale].node) > b.in.rowOf(b.in.tensors[y->scale].node);
    });
    for (const BlockScale* w : byRow) {
        const TensorEntry& weight = b.in.tensors[w->weight];
        const TensorEntry& scale = b.in.tensors[w->scale];
        const std::vector<std::int64_t> shape(weight.shape.begin(), weight.shape.end());
        const std::uint32_t es = elementSize(scale.dtype);
        auto computed = std::make_shared<const Dequantized>(
            Dequantized::Part{weight.storage, static_cast<std::uint64_t>(weight.storageOffset), weight.dtype},
            Dequantized::Part{scale.storage, static_cast<std::uint64_t>(scale.storageOffset) * es, scale.dtype}, shape,
            w->block, out);
        pickle::StorageRef ref;
        ref.key = "dequantized:" + std::string(weight.path);
        ref.location = weight.location.empty() ? pickle::Text("cpu") : weight.location;
        ref.dtype = out;
        ref.numel = weight.numel;
        ref.className = std::string(storageClassName(out));
        a.storages.push_back(ref);
        const auto index = static_cast<std::uint32_t>(a.storages.size() - 1);
        b.computedStorages[index] = computed;
        const pickle::ValueId made = pickle::contiguousTensor(a, index, out, shape);
        pickle::TensorInfo info = pickle::tensorOf(a, made);
        const pickle::TensorInfo& before = pickle::tensorOf(a, weight.value);
        info.requiresGrad = before.requiresGrad;
        info.isParameter = before.isParameter;
        info.parameterRequiresGrad = before.parameterRequiresGrad;
        a.tensors[static_cast<std::size_t>(a[made].i)] = info;
        a[weight.value] = a[made];
        refreshStridedArgs(a, weight.value);
        const std::string scalePath(scale.path);
        if (auto removed = removeNode(b, scale.node, scalePath); !removed) {
            return removed;
        }
        b.step(StepKind::Convert, std::string(weight.path),
               "tensor " + std::string(dtypeName(weight.dtype)) + " " + shapeText(shape) + " x " +
                   std::string(dtypeName(scale.dtype)) + " scale",
               "tensor " + std::string(dtypeName(out)) + " " + shapeText(shape),
               "dequantized in " + blockText(*w) + ": float32(weight) x scale, rounded to " +
                   std::string(dtypeName(out)) + " as torch's .to() rounds; '" + scalePath + "' is left out");
    }
    if (b.in.modelConfig && b.in.modelConfig->quantization) {
        b.step(StepKind::Note, b.rootPath, "", "",
               "config.json's quantization_config (quant_method " + b.in.modelConfig->quantization->method +
                   ") describes the input: from_pretrained of the output needs a config.json without it (a "
                   "--shard-size folder gets one; beside a file, write it yourself)");
    }
    return {};
}

}  // namespace ckpt::transform::detail
