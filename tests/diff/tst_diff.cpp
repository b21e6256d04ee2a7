// `ckptscope diff` in-process over pairs of real torch.save files (gen_diff_fixtures.py): each
// category of the report, the value differences against torch's own (oracle.json), the prefix
// alignment, the three renderings and the exit codes (0 the same weights, 1 differ, 2 bad input;
// --strict: 0 only when nothing differs, not even how the weights are stored).
#include "checkpoint/checkpoint.h"
#include "cli_run.h"
#include "diff/diff.h"

#include <QDir>
#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

namespace {

using json = nlohmann::json;

std::string fx(const std::string& name)
{
    return std::string(CKPTSCOPE_DIFF_FIXTURE_DIR) + "/" + name;
}

struct Run : ckpt::test::CliRun {
    json doc;
};

Run diffRun(std::vector<std::string> args, bool asJson = true)
{
    args.insert(args.begin(), "diff");
    if (asJson) {
        args.emplace_back("--json");
    }
    Run r;
    static_cast<ckpt::test::CliRun&>(r) = ckpt::test::ckptscope(args);
    if (asJson && !r.out.empty()) {
        r.doc = json::parse(r.out);
    }
    return r;
}

const json& entry(const json& doc, const std::string& key)
{
    for (const auto& e : doc["entries"]) {
        if (e["key"] == key) {
            return e;
        }
    }
    static const json none;
    return none;
}

json oracle()
{
    std::ifstream f(fx("oracle.json"));
    return json::parse(f);
}

std::string str(const json& j)
{
    return j.is_string() ? j.get<std::string>() : j.dump();
}

bool hasChange(const json& e, const std::string& what)
{
    for (const auto& c : e["changes"]) {
        if (c == what) {
            return true;
        }
    }
    return false;
}

}  // namespace

class TestDiff : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void equalPairs_data()
    {
        QTest::addColumn<QString>("b");
        QTest::addColumn<QString>("select");
        QTest::newRow("separate save") << QStringLiteral("same.pt") << QString();
        QTest::newRow("legacy format") << QStringLiteral("base_legacy.pt") << QString();
        QTest::newRow("safetensors root") << QStringLiteral("base.safetensors") << QStringLiteral("state_dict:");
    }

    void equalPairs()
    {
        QFETCH(QString, b);
        QFETCH(QString, select);
        std::vector<std::string> args{fx("base.pt"), fx(b.toStdString())};
        if (!select.isEmpty()) {
            args.insert(args.end(), {"--select", select.toStdString()});
        }
        const auto r = diffRun(args);
        QCOMPARE(r.rc, 0);
        QVERIFY(r.doc["equal"].get<bool>());
        QCOMPARE(r.doc["schema"].get<int>(), 2);
        QCOMPARE(r.doc["counts"]["changed"].get<int>(), 0);
        QCOMPARE(r.doc["counts"]["equal"].get<std::size_t>(), r.doc["entries"].size());
        const auto& w = entry(r.doc, select.isEmpty() ? "state_dict/emb.weight" : "emb.weight");
        QCOMPARE(str(w["status"]), std::string("equal"));
        QVERIFY(w["values"]["identical_bytes"].get<bool>());
    }

    void prefixesAligned_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("prefix");
        QTest::newRow("DataParallel") << QStringLiteral("ddp.pt") << QStringLiteral("module.");
        QTest::newRow("torch.compile") << QStringLiteral("compiled.pt") << QStringLiteral("_orig_mod.");
        QTest::newRow("FSDP") << QStringLiteral("fsdp.pt") << QStringLiteral("_fsdp_wrapped_module.");
        QTest::newRow("Opacus") << QStringLiteral("opacus.pt") << QStringLiteral("_module.");
    }

    void prefixesAligned()
    {
        QFETCH(QString, file);
        QFETCH(QString, prefix);
        const auto r = diffRun({fx(file.toStdString()), fx("base.pt")});
        QCOMPARE(r.rc, 0);
        QCOMPARE((r.doc["prefixes_aligned"]["a"]).dump(), json::array({prefix.toStdString()}).dump());
        QCOMPARE((r.doc["prefixes_aligned"]["b"]).dump(), json::array().dump());
        const auto& e = entry(r.doc, "state_dict/" + prefix.toStdString() + "fc.weight");
        QCOMPARE(str(e["status"]), std::string("equal"));
        QCOMPARE(str(e["key_b"]), std::string("state_dict/fc.weight"));
        const auto text = diffRun({fx(file.toStdString()), fx("base.pt")}, false);
        QVERIFY(text.out.find("Wrapper prefixes aligned: A's keys carry `" + prefix.toStdString()) !=
                std::string::npos);

        // Without alignment the same bytes sit under other keys: every tensor is a rename.
        const auto raw = diffRun({fx(file.toStdString()), fx("base.pt"), "--no-align"});
        QCOMPARE(raw.rc, 1);
        QCOMPARE(raw.doc["counts"]["renamed"].get<int>(), 5);
        QCOMPARE(raw.doc["counts"]["only_a"].get<int>(), 0);
        QCOMPARE(raw.doc["counts"]["only_b"].get<int>(), 0);
    }

    void renamed()
    {
        const auto r = diffRun({fx("base.pt"), fx("renamed.pt")});
        QCOMPARE(r.rc, 1);
        QCOMPARE(r.doc["counts"]["renamed"].get<int>(), 1);
        QCOMPARE(r.doc["counts"]["only_a"].get<int>(), 0);
        QCOMPARE(r.doc["counts"]["only_b"].get<int>(), 0);
        const auto& e = entry(r.doc, "state_dict/fc.weight");
        QCOMPARE(str(e["status"]), std::string("renamed"));
        QCOMPARE(str(e["key_b"]), std::string("state_dict/head.weight"));
        const auto text = diffRun({fx("base.pt"), fx("renamed.pt")}, false);
        QVERIFY(text.out.find("state_dict/fc.weight -> state_dict/head.weight") != std::string::npos);
    }

    void bf16CopyComparedByValue()
    {
        const json o = oracle();
        for (const bool loose : {true, false}) {
            std::vector<std::string> args{fx("base.pt"), fx("bf16.pt")};
            if (loose) {
                args.insert(args.end(), {"--rtol", "1e-2", "--atol", "1e-2"});
            }
            const auto r = diffRun(args);
            QCOMPARE(r.rc, 1);
            const json& expect = o[loose ? "bf16" : "bf16_strict"];
            for (const auto& [key, want] : expect.items()) {
                const auto& e = entry(r.doc, "state_dict/" + key);
                QCOMPARE(str(e["status"]), std::string("changed"));
                QVERIFY(hasChange(e, "dtype"));
                QCOMPARE(str(e["b"]["dtype"]), std::string("bfloat16"));
                QVERIFY(e["values"]["compared"].get<bool>());
                QCOMPARE(e["values"]["differing"].get<std::uint64_t>(), want["differing"].get<std::uint64_t>());
                QCOMPARE(e["values"]["max_abs_diff"].get<double>(), want["max_abs"].get<double>());
                QCOMPARE(e["values"]["allclose"].get<bool>(), want["allclose"].get<bool>());
            }
            QCOMPARE(str(entry(r.doc, "state_dict/bn.num_batches_tracked")["status"]), std::string("equal"));
        }
    }

    void changedValues()
    {
        const json want = oracle()["changed"]["emb.weight"];
        for (const char* threads : {"1", "2", "7"}) {
            const auto r = diffRun({fx("base.pt"), fx("changed.pt"), "--threads", threads});
            QCOMPARE(r.rc, 1);
            QCOMPARE(r.doc["counts"]["changed"].get<int>(), 1);
            const auto& e = entry(r.doc, "state_dict/emb.weight");
            QCOMPARE(str(e["status"]), std::string("changed"));
            QCOMPARE((e["changes"]).dump(), json::array({"values"}).dump());
            QCOMPARE(e["values"]["differing"].get<std::uint64_t>(), want["differing"].get<std::uint64_t>());
            QCOMPARE(e["values"]["max_abs_diff"].get<double>(), want["max_abs"].get<double>());
            QCOMPARE(e["values"]["allclose"].get<bool>(), want["allclose"].get<bool>());
            QVERIFY(!e["values"]["identical_bytes"].get<bool>());
        }
    }

    void nonTensorValues()
    {
        const auto r = diffRun({fx("base.pt"), fx("epoch20.pt")});
        QCOMPARE(r.rc, 1);
        QCOMPARE(r.doc["counts"]["changed"].get<int>(), 2);
        const auto& epoch = entry(r.doc, "epoch");
        QCOMPARE(str(epoch["status"]), std::string("changed"));
        QCOMPARE(str(epoch["kind"]), std::string("value"));
        QCOMPARE(str(epoch["a"]), std::string("10"));
        QCOMPARE(str(epoch["b"]), std::string("20"));
        QCOMPARE(str(entry(r.doc, "lr")["status"]), std::string("changed"));
        QCOMPARE(str(entry(r.doc, "args/hidden")["status"]), std::string("equal"));
        QCOMPARE(str(entry(r.doc, "state_dict/fc.weight")["status"]), std::string("equal"));
    }

    // The same arguments as an argparse.Namespace and as a dict: every leaf is equal, but the value
    // changed type (`ckpt["args"].hidden` no longer works). The weights are the same (exit 0), and
    // the class change is reported; --strict counts it as a difference.
    void typeOfAValueChanged()
    {
        const auto r = diffRun({fx("args_namespace.pt"), fx("base.pt")});
        QCOMPARE(r.rc, 0);
        QVERIFY(!r.doc["equal"].get<bool>());
        QVERIFY(r.doc["same_weights"].get<bool>());
        QCOMPARE(r.doc["counts"]["changed"].get<int>(), 1);
        QCOMPARE(r.doc["counts"]["stored_differently"].get<int>(), 1);
        QCOMPARE(diffRun({fx("args_namespace.pt"), fx("base.pt"), "--strict"}).rc, 1);
        const auto& args = entry(r.doc, "args");
        QCOMPARE(str(args["status"]), std::string("changed"));
        QVERIFY(hasChange(args, "type"));
        QCOMPARE(str(args["a"]), std::string("argparse.Namespace"));
        QCOMPARE(str(args["b"]), std::string("dict"));
        QCOMPARE(str(entry(r.doc, "args/hidden")["status"]), std::string("equal"));
        const auto text = diffRun({fx("args_namespace.pt"), fx("base.pt")}, false);
        QVERIFY2(text.out.find("args: type argparse.Namespace -> dict") != std::string::npos, text.out.c_str());
        // An OrderedDict and a dict are one mapping: a state dict against safetensors stays equal.
        QCOMPARE(diffRun({fx("base.pt"), fx("same.pt")}).rc, 0);
    }

    // Sparse tensors compare by their stored indices and values: a changed value is a change, an
    // equal copy is equal (both used to read "equal": only the dense shape was compared).
    void sparseByStoredValues()
    {
        const auto same = diffRun({fx("sparse_a.pt"), fx("sparse_same.pt")});
        QCOMPARE(same.rc, 0);
        QVERIFY(entry(same.doc, "s")["values"]["identical_bytes"].get<bool>());
        const auto changed = diffRun({fx("sparse_a.pt"), fx("sparse_b.pt")});
        QCOMPARE(changed.rc, 1);
        QVERIFY(hasChange(entry(changed.doc, "s"), "values"));
    }

    void onlyInOneAndShape()
    {
        const auto r = diffRun({fx("base.pt"), fx("extra.pt")});
        QCOMPARE(r.rc, 1);
        QCOMPARE(str(entry(r.doc, "state_dict/bn.running_mean")["status"]), std::string("only_a"));
        QCOMPARE(str(entry(r.doc, "state_dict/bn.running_var")["status"]), std::string("only_b"));
        const auto& bias = entry(r.doc, "state_dict/fc.bias");
        QCOMPARE(str(bias["status"]), std::string("changed"));
        QVERIFY(hasChange(bias, "shape"));
        QCOMPARE(str(bias["values"]["note"]), std::string("shapes differ"));
        const auto text = diffRun({fx("base.pt"), fx("extra.pt")}, false);
        QVERIFY(text.out.find("- state_dict/bn.running_mean") != std::string::npos);
        QVERIFY(text.out.find("+ state_dict/bn.running_var") != std::string::npos);
        QVERIFY(text.out.find("shape [4] -> [2, 2]") != std::string::npos);
    }

    // A transposed view holds the same weights as a contiguous copy: exit 0, the stride change
    // shown as how they are stored; --strict exits 1 on it.
    void strideOnly()
    {
        const auto r = diffRun({fx("base.pt"), fx("strided.pt")});
        QCOMPARE(r.rc, 0);
        QVERIFY(!r.doc["equal"].get<bool>());
        QVERIFY(r.doc["same_weights"].get<bool>());
        QCOMPARE(r.doc["counts"]["stored_differently"].get<int>(), 1);
        const auto& e = entry(r.doc, "state_dict/fc.weight");
        QCOMPARE(str(e["status"]), std::string("changed"));
        QCOMPARE((e["changes"]).dump(), json::array({"stride"}).dump());
        QCOMPARE((e["b"]["stride"]).dump(), json::array({1, 4}).dump());
        // Gathered from the transposed view in C order, the values are the same ones.
        QVERIFY(e["values"]["identical_bytes"].get<bool>());
        const auto strict = diffRun({fx("base.pt"), fx("strided.pt"), "--strict"});
        QCOMPARE(strict.rc, 1);
        QCOMPARE(strict.doc.dump(), r.doc.dump());  // --strict changes the exit code alone
        const auto text = diffRun({fx("base.pt"), fx("strided.pt")}, false);
        QVERIFY2(text.out.starts_with("A: ") && text.out.find("\nSame weights: 1 changed, all only in how they are "
                                                              "stored; 0 renamed") != std::string::npos,
                 text.out.c_str());
        QVERIFY2(text.out.find("1 with other strides") != std::string::npos, text.out.c_str());
        QVERIFY2(text.out.find("\nStored differently, the same weights (1):\n  state_dict/fc.weight: stride") !=
                     std::string::npos,
                 text.out.c_str());
    }

    // The README's "are these the same weights?": a DDP save (storages on cuda:0, `module.` keys)
    // against the safetensors file convert exports from it. Only the saved device differs: the same
    // weights, exit 0, and the report says where each side was saved; --strict exits 1.
    void savedDeviceIsNoDifferenceInTheWeights()
    {
        QTemporaryDir tmp;
        const std::string sample = CKPTSCOPE_SOURCE_DIR "/resources/sample/ddp_checkpoint.pt";
        const std::string exported = tmp.filePath(QStringLiteral("model.safetensors")).toStdString();
        const auto convert =
            ckpt::test::ckptscope({"convert", sample, "-o", exported, "--single-card", "--select", "state_dict"});
        QVERIFY2(convert.rc == 0, convert.err.c_str());
        const auto r = diffRun({sample, exported, "--select", "state_dict:"});
        QVERIFY2(r.rc == 0, r.out.c_str());
        QVERIFY(r.doc["same_weights"].get<bool>());
        QVERIFY(!r.doc["equal"].get<bool>());
        const auto changed = r.doc["counts"]["changed"].get<int>();
        QVERIFY(changed > 0);
        QCOMPARE(r.doc["counts"]["stored_differently"].get<int>(), changed);
        for (const auto& e : r.doc["entries"]) {
            if (e["status"] == "changed") {
                QCOMPARE(e["changes"].dump(), json::array({"device"}).dump());
                QCOMPARE(str(e["a"]["device"]), std::string("cuda:0"));
                QCOMPARE(str(e["b"]["device"]), std::string("cpu"));
                QVERIFY(e["values"]["identical_bytes"].get<bool>());
            }
        }
        const auto text = diffRun({sample, exported, "--select", "state_dict:"}, false);
        QVERIFY2(text.out.find("\nSame weights: ") != std::string::npos, text.out.c_str());
        QVERIFY2(text.out.find(std::to_string(changed) + " saved on another device") != std::string::npos,
                 text.out.c_str());
        QVERIFY2(text.out.find("saved on cuda:0 -> cpu; bytes identical") != std::string::npos, text.out.c_str());
        const auto summary = diffRun({sample, exported, "--select", "state_dict:", "--summary"}, false);
        QCOMPARE(summary.rc, 0);
        QVERIFY2(summary.out.find(": same weights (" + std::to_string(changed) +
                                  " changed, all only in how they are stored; 0 renamed") != std::string::npos,
                 summary.out.c_str());
        QCOMPARE(diffRun({sample, exported, "--select", "state_dict:", "--strict"}).rc, 1);
        QCOMPARE(diffRun({sample, exported, "--select", "state_dict:", "--strict", "--summary"}, false).rc, 1);
    }

    void summaryLine()
    {
        const auto differ = diffRun({fx("base.pt"), fx("changed.pt"), "--summary"}, false);
        QCOMPARE(differ.rc, 1);
        QCOMPARE(std::count(differ.out.begin(), differ.out.end(), '\n'), 1);
        QVERIFY(differ.out.find(": differ (1 changed, 0 renamed, 0 only in A, 0 only in B,") != std::string::npos);
        // The tolerances show in the one line too: how many of the tensors whose values differ are
        // within them, as torch.allclose says (oracle.json).
        const json o = oracle();
        for (const bool loose : {true, false}) {
            std::vector<std::string> args{fx("base.pt"), fx("bf16.pt"), "--summary"};
            if (loose) {
                args.insert(args.end(), {"--rtol", "1e-2", "--atol", "1e-2"});
            }
            const auto line = diffRun(args, false);
            QCOMPARE(line.rc, 1);
            std::size_t differing = 0;
            std::size_t close = 0;
            for (const auto& [key, want] : o[loose ? "bf16" : "bf16_strict"].items()) {
                differing += want["differing"].get<std::uint64_t>() > 0 ? 1 : 0;
                close += want["differing"].get<std::uint64_t>() > 0 && want["allclose"].get<bool>() ? 1 : 0;
            }
            QVERIFY(differing > 0);
            const std::string within = close == differing ? std::string("all") : std::to_string(close) + " of them";
            const std::string want = "values differ in " + std::to_string(differing) + " tensors, " + within +
                                     " within rtol " + (loose ? "0.01, atol 0.01" : "1e-05, atol 1e-08") + ")";
            QVERIFY2(line.out.find(want) != std::string::npos, (line.out + " lacks " + want).c_str());
        }
        const auto same = diffRun({fx("ddp.pt"), fx("base.pt"), "--summary"}, false);
        QCOMPARE(same.rc, 0);
        QVERIFY(same.out.find(": equal (") != std::string::npos);
        QVERIFY(same.out.find("wrapper prefixes aligned") != std::string::npos);
    }

    void badInput()
    {
        QCOMPARE(diffRun({fx("base.pt"), fx("no_such.pt")}).rc, 2);
        QCOMPARE(diffRun({fx("oracle.json"), fx("base.pt")}).rc, 2);
        const auto sel = diffRun({fx("base.pt"), fx("same.pt"), "--select", "nothing:"});
        QCOMPARE(sel.rc, 2);
        QVERIFY(sel.err.find("no key path 'nothing'") != std::string::npos);
        QCOMPARE(std::count(sel.err.begin(), sel.err.end(), '\n'), 1);
        const auto rtol = diffRun({fx("base.pt"), fx("same.pt"), "--rtol", "-1"});
        QCOMPARE(rtol.rc, 2);
        QVERIFY(rtol.err.find("--rtol: must be a number >= 0") != std::string::npos);
        QCOMPARE(diffRun({fx("base.pt"), fx("same.pt"), "--atol", "x"}).rc, 2);
        QCOMPARE(diffRun({fx("base.pt"), fx("same.pt"), "--threads", "0"}).rc, 2);
    }

    void rankDirectory()
    {
        const auto same = diffRun({fx("ranks_same")});
        QCOMPARE(same.rc, 0);
        QVERIFY(same.doc["all_equal"].get<bool>());
        QVERIFY(str(same.doc["reference"]).ends_with("/rank_0.pt"));  // rank_10 sorts after rank_2
        QCOMPARE(same.doc["files"].size(), std::size_t{3});
        QVERIFY(str(same.doc["files"][2]["file"]).ends_with("/rank_10.pt"));

        const auto drift = diffRun({fx("ranks_drift")});
        QCOMPARE(drift.rc, 1);
        QVERIFY(!drift.doc["all_equal"].get<bool>());
        for (const auto& f : drift.doc["files"]) {
            const bool rank2 = str(f["file"]).ends_with("/rank_2.pt");
            QCOMPARE(f["equal"].get<bool>(), !rank2);
            QCOMPARE(f["counts"]["changed"].get<int>(), rank2 ? 1 : 0);
        }
        const auto text = diffRun({fx("ranks_drift")}, false);
        QCOMPARE(std::count(text.out.begin(), text.out.end(), '\n'), 3);
        QVERIFY(text.out.find("rank_2.pt: differ (1 changed") != std::string::npos);

        QCOMPARE(diffRun({fx("base.pt")}).rc, 2);  // one file and no directory
    }

    // A Hugging Face sharded set is one checkpoint: its folder, index or any shard against the
    // file it came from.
    void shardedSets()
    {
        for (const std::string& side : {std::string("hf_bin"), std::string("hf_bin/pytorch_model.bin.index.json"),
                                        std::string("hf_bin/pytorch_model-00002-of-00002.bin")}) {
            const auto same = diffRun({fx(side), fx("flat.pt")});
            QVERIFY2(same.rc == 0, (side + ": " + same.err + same.out).c_str());
            QCOMPARE(same.doc["counts"]["equal"].get<int>(), 5);
            QCOMPARE(same.doc["a"]["files"].get<int>(), 2);
            QVERIFY(str(same.doc["a"]["format"]).starts_with("Hugging Face sharded checkpoint (2 files, assembled"));
        }
        // The changed safetensors set against base's state_dict: the one changed tensor, as torch says.
        const auto changed = diffRun({fx("base.pt"), fx("hf_st_changed"), "--select", "state_dict:"});
        QCOMPARE(changed.rc, 1);
        QCOMPARE(changed.doc["counts"]["changed"].get<int>(), 1);
        QCOMPARE(changed.doc["counts"]["equal"].get<int>(), 4);
        const auto& e = entry(changed.doc, "emb.weight");
        const auto want = oracle()["changed"]["emb.weight"];
        QCOMPARE(e["values"]["differing"].get<std::uint64_t>(), want["differing"].get<std::uint64_t>());
        QCOMPARE(e["values"]["max_abs_diff"].get<double>(), want["max_abs"].get<double>());
        // Two sets against each other.
        QCOMPARE(diffRun({fx("hf_bin"), fx("hf_st_changed")}).rc, 1);
        // An incomplete set is bad input, named as such.
        const auto missing = diffRun({fx("hf_incomplete"), fx("flat.pt")});
        QCOMPARE(missing.rc, 2);
        QVERIFY2(missing.err.find("incomplete") != std::string::npos, missing.err.c_str());
        // One set alone is not a rank directory.
        QCOMPARE(diffRun({fx("hf_bin")}).rc, 2);
    }

    // A set whose tensors are pieces of several files (ZeRO partitions, DCP chunks, FSDP local
    // shards) is assembled as it is read: the stage-2 folder equals the fp32 model zero_to_fp32
    // rebuilds (gen_sharded.py's expected file), and nothing is written to the temporary directory.
    void assembledSets()
    {
        const std::string dir = CKPTSCOPE_SHARDED_FIXTURE_DIR;
        QTemporaryDir tmp;
        qputenv("TMPDIR", tmp.path().toUtf8());
        const auto same = diffRun({dir + "/zero2_complete", dir + "/zero2_complete.expected.pt"});
        QVERIFY2(same.rc == 0, (same.err + same.out).c_str());
        QCOMPARE(same.doc["counts"]["equal"].get<int>(), 8);
        QVERIFY(str(same.doc["a"]["format"]).find("ZeRO") != std::string::npos);
        // Three ranks' partitions against the two-rank set: the same model.
        QCOMPARE(diffRun({dir + "/zero2_w3", dir + "/zero2_complete"}).rc, 0);
        // A set that cannot be assembled is bad input, with the reason.
        const auto z3 = diffRun({dir + "/zero3_rank_missing", dir + "/zero2_complete.expected.pt"});
        QCOMPARE(z3.rc, 2);
        QCOMPARE(std::count(z3.err.begin(), z3.err.end(), '\n'), 1);
        QVERIFY(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::Hidden | QDir::NoDotAndDotDot).isEmpty());
        // ZeRO and Hugging Face sets are read in place (sharded/set_view.h): nothing is written, so
        // a temporary directory that does not exist changes nothing.
        qputenv("TMPDIR", QByteArrayLiteral("/nonexistent/ckptscope-tmp"));
        const auto inPlace = diffRun({dir + "/zero2_w3", dir + "/zero2_complete.expected.pt"});
        QVERIFY2(inPlace.rc == 0, (inPlace.err + inPlace.out).c_str());
        QCOMPARE(inPlace.doc["a"]["files"].get<int>(), 4);  // latest's tag folder: 1 model + 3 optimizer rank files
        const auto hf = diffRun({dir + "/hf_bin", dir + "/hf_bin.expected.pt"});
        QVERIFY2(hf.rc == 0, (hf.err + hf.out).c_str());
        QCOMPARE(hf.doc["a"]["files"].get<int>(), 3);
        // So are DCP folders and FSDP rank files, each tensor assembled from its boxes as it is read:
        // equal to the state dict dcp_to_torch_save (or a full state dict) gives for them.
        for (const std::string& set : {std::string(CKPTSCOPE_DCP_FIXTURE_DIR "/dcp_basic"),
                                       std::string(CKPTSCOPE_DCP_FIXTURE_DIR "/dcp_per_item"),
                                       std::string(CKPTSCOPE_FSDP_FIXTURE_DIR "/fsdp_st"),
                                       std::string(CKPTSCOPE_FSDP_FIXTURE_DIR "/fsdp_dtensor")}) {
            const auto boxes = diffRun({set, set + ".expected.pt"});
            QVERIFY2(boxes.rc == 0, (set + ": " + boxes.err + boxes.out).c_str());
            QVERIFY(boxes.doc["counts"]["equal"].get<int>() > 0);
        }
        qunsetenv("TMPDIR");
    }

    // float8 tensors are compared by value: against float32 copies of the values their bytes encode.
    void float8ByValue()
    {
        for (const char* f : {"fp8_e4m3.safetensors", "fp8_e5m2.safetensors"}) {
            const auto r = diffRun({fx(f), fx("fp8_as_f32.safetensors")});
            QVERIFY2(r.rc == 1, r.out.c_str());  // the dtype differs
            const auto& e = entry(r.doc, "w");
            QVERIFY(hasChange(e, "dtype"));
            QVERIFY(!hasChange(e, "values"));
            QCOMPARE(e["values"]["differing"].get<int>(), 0);
        }
        const auto off = diffRun({fx("fp8_e5m2_off.safetensors"), fx("fp8_as_f32.safetensors")});
        const auto& e = entry(off.doc, "w");
        QCOMPARE(e["values"]["differing"].get<int>(), 1);
        QCOMPARE(e["values"]["max_abs_diff"].get<double>(), 1.0);  // 0xC0 is -2.0
    }

    // Quantized tensors are their values: the same integers under another scale differ by what
    // torch's dequantize() gives; per-channel quantizers compare by their scale tensors.
    void quantized()
    {
        QCOMPARE(diffRun({fx("quant_a.pt"), fx("quant_same.pt")}).rc, 0);
        const auto scaled = diffRun({fx("quant_a.pt"), fx("quant_scale.pt")});
        QCOMPARE(scaled.rc, 1);
        const auto& e = entry(scaled.doc, "w");
        QVERIFY(hasChange(e, "quantizer"));
        QVERIFY(hasChange(e, "values"));
        QVERIFY(!e["values"]["identical_bytes"].get<bool>());
        const auto want = oracle()["quant_scale"]["w"];
        QCOMPARE(e["values"]["differing"].get<std::uint64_t>(), want["differing"].get<std::uint64_t>());
        // torch dequantizes to float32; the diff computes (q - zero_point) * scale in float64.
        QVERIFY(std::abs(e["values"]["max_abs_diff"].get<double>() - want["max_abs"].get<double>()) < 1e-6);
        QCOMPARE(e["values"]["allclose"].get<bool>(), want["allclose"].get<bool>());
        QVERIFY(str(e["a"]["quantizer"]).starts_with("per_tensor_affine, scale 0.05"));

        QCOMPARE(diffRun({fx("quant_pc_a.pt"), fx("quant_pc_same.pt")}).rc, 0);
        const auto pc = diffRun({fx("quant_pc_a.pt"), fx("quant_pc_scale.pt")});
        QCOMPARE(pc.rc, 1);
        const auto& p = entry(pc.doc, "w");
        QVERIFY(hasChange(p, "quantizer"));
        QVERIFY(p["values"]["identical_bytes"].get<bool>());  // the integers are the same
        QVERIFY(str(p["a"]["quantizer"]).starts_with("per_channel_affine"));
        const auto text = diffRun({fx("quant_pc_a.pt"), fx("quant_pc_scale.pt")}, false);
        QVERIFY2(text.out.find("quantizer per_channel_affine") != std::string::npos, text.out.c_str());
    }

    // Bytes that cannot be read are bad input (exit 2), not a difference.
    void unreadableTensor()
    {
        const auto cut = diffRun({fx("base.pt"), fx("bad_record.pt")});
        QVERIFY2(cut.rc == 2, (cut.err + cut.out).c_str());
        QCOMPARE(cut.doc["counts"]["unreadable"].get<int>(), 1);
        QVERIFY(cut.err.find("could not be read") != std::string::npos);
        bool flagged = false;
        for (const auto& e : cut.doc["entries"]) {
            flagged = flagged || (e.contains("values") && e["values"].value("unreadable", false));
        }
        QVERIFY(flagged);
    }

    void differenceHistogram()
    {
        auto a = ckpt::openCheckpoint(fx("base.pt"));
        auto b = ckpt::openCheckpoint(fx("changed.pt"));
        QVERIFY(a && b);
        auto r = ckpt::diff::compare(**a, **b, {});
        QVERIFY(r);
        const auto it = std::find_if(r->entries.begin(), r->entries.end(),
                                     [](const auto& e) { return e.key == "state_dict/emb.weight"; });
        QVERIFY(it != r->entries.end());
        auto h = ckpt::diff::differenceHistogram(**a, it->tensorA, **b, it->tensorB, 8);
        QVERIFY(h);
        QCOMPARE(h->counts.size(), std::size_t{8});
        QCOMPARE(std::accumulate(h->counts.begin(), h->counts.end(), std::uint64_t{0}), std::uint64_t{80});
        // a - b is about +2 once (the top bin), about -0.5 once, 0 for the 78 others; the range is
        // symmetric around 0 and as wide as torch's largest difference.
        QCOMPARE(h->high, oracle()["changed"]["emb.weight"]["max_abs"].get<double>());
        QCOMPARE(h->low, -h->high);
        QCOMPARE(h->counts.back(), std::uint64_t{1});
        QCOMPARE(h->counts[4], std::uint64_t{78});
        QCOMPARE(h->counts[2] + h->counts[3], std::uint64_t{1});
    }

    void cancelled()
    {
        auto a = ckpt::openCheckpoint(fx("base.pt"));
        auto b = ckpt::openCheckpoint(fx("changed.pt"));
        QVERIFY(a && b);
        std::stop_source stop;
        stop.request_stop();
        auto r = ckpt::diff::compare(**a, **b, {}, stop.get_token());
        QVERIFY(!r);
        QCOMPARE(r.error().code, ckpt::ErrorCode::Cancelled);
    }
};

QTEST_GUILESS_MAIN(TestDiff)
#include "tst_diff.moc"
