// The tie rule (util/tied_pairs.h) over key lists and config.json texts: what transformers 5.12's
// tie_weights gives back for each class's _tied_weights_keys and config (the table is generated from
// that library; tests/torch2/torch2_models.py checks the same against real save_pretrained folders).
#include "util/tied_pairs.h"

#include <QTest>

#include <algorithm>

using namespace ckpt;

namespace {

ModelConfig config(const std::string& json)
{
    auto c = parseModelConfig(json);
    if (!c) {
        qFatal("bad config in the test: %s", c.error().message.c_str());
    }
    return *c;
}

std::vector<std::string> names(const std::vector<TiedName>& list, bool withSource = false)
{
    std::vector<std::string> out;
    for (const auto& t : list) {
        out.push_back(withSource ? t.name + "=" + t.source : t.name);
    }
    std::sort(out.begin(), out.end());
    return out;
}

const std::vector<std::string> kT5Keys{"shared.weight", "encoder.block.0.layer.0.SelfAttention.q.weight",
                                       "decoder.block.0.layer.0.SelfAttention.q.weight"};

}  // namespace

class TstTiedWeights : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // T5Config sets tie_word_embeddings true whatever config.json says (v1.1's false included), and
    // T5ForConditionalGeneration ties three names to shared.weight.
    void t5TiesThreeNamesWhateverTheConfigSays()
    {
        for (const char* tie : {"", R"(, "tie_word_embeddings": false)"}) {
            const auto r = tiedWeights(
                config(std::string(R"({"architectures": ["T5ForConditionalGeneration"])") + tie + "}"), kT5Keys);
            QCOMPARE(names(r.restored, true), (std::vector<std::string>{"decoder.embed_tokens.weight=shared.weight",
                                                                        "encoder.embed_tokens.weight=shared.weight",
                                                                        "lm_head.weight=shared.weight"}));
            QVERIFY(r.untied.empty() && r.unknown.empty());
            QVERIFY(r.decidedBy.find("whatever config.json says") != std::string::npos);
        }
    }

    // GPT2Config ties unless config.json says otherwise; LlamaConfig does not.
    void anAbsentKeyMeansWhatTheConfigClassSays()
    {
        const auto gpt2 = tiedWeights(config(R"({"architectures": ["GPT2LMHeadModel"]})"),
                                      {"transformer.wte.weight", "transformer.h.0.attn.c_attn.weight"});
        QCOMPARE(names(gpt2.restored, true), (std::vector<std::string>{"lm_head.weight=transformer.wte.weight"}));
        const auto llama = tiedWeights(config(R"({"architectures": ["LlamaForCausalLM"]})"),
                                       {"model.embed_tokens.weight", "model.norm.weight"});
        QVERIFY(llama.restored.empty());
        QCOMPARE(names(llama.untied), (std::vector<std::string>{"lm_head.weight"}));
        const auto tied = tiedWeights(config(R"({"architectures": ["LlamaForCausalLM"], "tie_word_embeddings": true})"),
                                      {"model.embed_tokens.weight", "model.norm.weight"});
        QCOMPARE(names(tied.restored), (std::vector<std::string>{"lm_head.weight"}));
        // text_config's, for composite models whose top level leaves it out (LlavaConfig's rule)
        const auto text = tiedWeights(
            config(
                R"({"architectures": ["LlavaForConditionalGeneration"], "text_config": {"tie_word_embeddings": true}})"),
            {"model.language_model.embed_tokens.weight"});
        QCOMPARE(names(text.restored), (std::vector<std::string>{"lm_head.weight"}));
    }

    // tie_weights is symmetric: a missing source takes the target that is stored.
    void aMissingSourceTakesTheStoredTarget()
    {
        const auto r = tiedWeights(config(R"({"architectures": ["GPT2LMHeadModel"]})"), {"lm_head.weight"});
        QCOMPARE(names(r.restored, true), (std::vector<std::string>{"transformer.wte.weight=lm_head.weight"}));
    }

    // A submodel's pairs under its attribute's name: BartForConditionalGeneration's `model`.
    void submodelPairsCount()
    {
        const auto r = tiedWeights(config(R"({"architectures": ["BartForConditionalGeneration"]})"),
                                   {"model.shared.weight", "final_logits_bias"});
        QCOMPARE(names(r.restored), (std::vector<std::string>{"lm_head.weight", "model.decoder.embed_tokens.weight",
                                                              "model.encoder.embed_tokens.weight"}));
    }

    // A name in a mapping that is a module stands for every parameter under it.
    void aModuleNameStandsForItsParameters()
    {
        const auto r = tiedWeights(config(R"({"architectures": ["PPDocLayoutV3Model"]})"),
                                   {"enc_score_head.weight", "enc_score_head.bias"});
        QCOMPARE(names(r.restored, true),
                 (std::vector<std::string>{"decoder.class_embed.bias=enc_score_head.bias",
                                           "decoder.class_embed.weight=enc_score_head.weight"}));
    }

    void whatCannotBeKnownIsSaidAndNotRestored()
    {
        const std::vector<std::string> keys{"model.embed_tokens.weight", "model.norm.weight"};
        const auto none = tiedWeights(std::nullopt, keys);
        QVERIFY(none.restored.empty());
        QCOMPARE(names(none.unknown), (std::vector<std::string>{"lm_head.weight"}));
        QVERIFY(none.unknownWhy.find("no config.json") != std::string::npos);
        const auto custom = tiedWeights(config(R"({"architectures": ["MyOwnForCausalLM"]})"), keys);
        QCOMPARE(names(custom.unknown), (std::vector<std::string>{"lm_head.weight"}));
        QVERIFY(custom.unknownWhy.find("MyOwnForCausalLM") != std::string::npos);
        const auto marian = tiedWeights(config(R"({"architectures": ["MarianMTModel"]})"),
                                        {"model.shared.weight", "final_logits_bias"});
        QVERIFY(marian.restored.empty());
        QVERIFY(!marian.unknown.empty());
        QVERIFY(marian.unknownWhy.find("when it is built") != std::string::npos);
        const auto encdec =
            tiedWeights(config(R"({"architectures": ["T5ForConditionalGeneration"], "tie_encoder_decoder": true})"),
                        {"shared.weight", "encoder.block.0.w", "decoder.block.0.w", "decoder.block.0.x"});
        QCOMPARE(names(encdec.unknown), (std::vector<std::string>{"encoder.block.0.x"}));
        QVERIFY(encdec.unknownWhy.find("tie_encoder_decoder") != std::string::npos);
        // nothing a class ties: nothing said
        QVERIFY(tiedWeights(std::nullopt, {"fc.weight", "fc.bias"}).empty());
        QVERIFY(tiedWeights(config(R"({"architectures": ["LlamaModel"]})"), {"embed_tokens.weight"}).empty());
    }

    // What a safetensors output keeps of a tie: the source transformers keeps, else the sorted-first.
    void keptNameIsTheSource()
    {
        QCOMPARE(keptTiedName(
                     {"lm_head.weight", "encoder.embed_tokens.weight", "shared.weight", "decoder.embed_tokens.weight"}),
                 std::string("shared.weight"));
        QCOMPARE(keptTiedName({"lm_head.weight", "transformer.wte.weight"}), std::string("transformer.wte.weight"));
        QCOMPARE(keptTiedName({"b", "a"}), std::string("a"));
        QCOMPARE(keptTiedName({"lm_head.weight", "model.embed_tokens.weight", "x"}), std::string("lm_head.weight"));
    }

    void quantizationConfigIsRead()
    {
        const auto c = config(R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                  "activation_scheme": "dynamic", "weight_block_size": [128, 64]}})");
        QVERIFY(c.quantization);
        QCOMPARE(c.quantization->method, std::string("fp8"));
        QCOMPARE(*c.quantization->blockSize, (std::vector<std::int64_t>{128, 64}));
        QVERIFY(!parseModelConfig("[1, 2]"));
    }
};

QTEST_GUILESS_MAIN(TstTiedWeights)
#include "tst_tied_weights.moc"
