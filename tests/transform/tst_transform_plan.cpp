// makePlan over the real fixtures: the exact steps and the output tree each edit gives.
#include "transform/transform.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <map>

using ckpt::transform::makePlan;
using ckpt::transform::Options;
using ckpt::transform::Plan;
using ckpt::transform::StepKind;
namespace pk = ckpt::pickle;

namespace {

QString fixture(const char* name)
{
    return QStringLiteral(CKPTSCOPE_FIXTURE_DIR "/") + QString::fromLatin1(name);
}

ckpt::CheckpointPtr open(const QString& path)
{
    auto c = ckpt::openCheckpoint(path.toStdString());
    if (!c) {
        qWarning("%s", c.error().describe().c_str());
        return nullptr;
    }
    return *c;
}

Plan plan(const ckpt::Checkpoint& c, const Options& o)
{
    auto p = makePlan(c, o);
    if (!p) {
        qFatal("makePlan failed: %s", p.error().describe().c_str());
    }
    return std::move(*p);
}

Options fromJson(const char* json)
{
    auto o = Options::fromJson(json);
    if (!o) {
        qFatal("bad options: %s", o.error().message.c_str());
    }
    return *o;
}

pk::ValueId at(const pk::Arena& a, pk::ValueId dict, const std::string& key)
{
    const auto& items = a[dict].items;
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        if (pk::keyText(a, items[i]) == key) {
            return items[i + 1];
        }
    }
    return {};
}

std::vector<std::string> keysOf(const pk::Arena& a, pk::ValueId dict)
{
    std::vector<std::string> keys;
    const auto& items = a[dict].items;
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
        keys.push_back(pk::keyText(a, items[i]));
    }
    return keys;
}

// `_metadata` of a state dict as (key, version) pairs.
std::vector<std::pair<std::string, std::int64_t>> metadataOf(const pk::Arena& a, pk::ValueId dict)
{
    std::vector<std::pair<std::string, std::int64_t>> out;
    const pk::ValueId attrs = a[dict].attrs;
    if (!attrs.valid()) {
        return out;
    }
    const pk::ValueId meta = at(a, attrs, "_metadata");
    if (!meta.valid()) {
        return out;
    }
    for (const auto& k : keysOf(a, meta)) {
        const pk::ValueId v = at(a, at(a, meta, k), "version");
        out.emplace_back(k, v.valid() ? a[v].i : -1);
    }
    return out;
}

std::size_t count(const Plan& p, StepKind k)
{
    return static_cast<std::size_t>(
        std::count_if(p.steps.begin(), p.steps.end(), [&](const auto& s) { return s.kind == k; }));
}

const std::vector<std::string> kConvNetKeys = {
    "conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
    "fc.weight",   "fc.bias"};

std::vector<std::string> withPrefix(const std::string& p, const std::vector<std::string>& keys)
{
    std::vector<std::string> out;
    for (const auto& k : keys) {
        out.push_back(p + k);
    }
    return out;
}

}  // namespace

class TestTransformPlan : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY2(QFile::exists(fixture("manifest.json")), "fixtures missing: run ctest (fixture torch_fixtures)");
    }

    void cleanFileChangesNothing()
    {
        auto c = open(fixture("plain_sd.pt"));
        QVERIFY(c);
        const Plan p = plan(*c, Options{});
        QVERIFY(p.changesNothing());
        QCOMPARE(p.storages.size(), c->storages.size());
        QCOMPARE(keysOf(p.arena, p.root), kConvNetKeys);
        for (std::size_t i = 0; i < p.storages.size(); ++i) {
            QCOMPARE(p.storages[i].nbytes, c->storages[p.storages[i].source].nbytes);
            QCOMPARE(p.storages[i].byteOffset, std::uint64_t{0});
            QCOMPARE(p.storages[i].key, std::to_string(i));
            QCOMPARE(p.arena.storages[i].key, p.storages[i].key);
        }
        // The presets change nothing either on a clean CPU state dict (single) ...
        QVERIFY(plan(*c, ckpt::transform::singleCardPreset()).changesNothing());
    }

    void stripModulePrefixRenamesKeysAndMetadata()
    {
        auto c = open(fixture("ddp_sd.pt"));
        QVERIFY(c);
        const Plan p = plan(*c, fromJson(R"({"strip_prefix":"module."})"));
        QCOMPARE(keysOf(p.arena, p.root), kConvNetKeys);                // order kept
        QCOMPARE(count(p, StepKind::Rename), kConvNetKeys.size() + 1);  // + _metadata
        QCOMPARE(p.steps.front().before, std::string("module.conv.weight"));
        QCOMPARE(p.steps.front().after, std::string("conv.weight"));
        // consume_prefix_in_state_dict_if_present: `module` -> '' (the model's root), `module.bn` -> `bn`.
        const auto meta = metadataOf(p.arena, p.root);
        const std::vector<std::pair<std::string, std::int64_t>> want = {{"", 1}, {"conv", 1}, {"bn", 2}, {"fc", 1}};
        QCOMPARE(meta, want);
        QVERIFY(!p.changesNothing());
    }

    void addPrefixMatchesDataParallel()
    {
        auto plainCk = open(fixture("plain_sd.pt"));
        auto ddpCk = open(fixture("ddp_sd.pt"));
        QVERIFY(plainCk && ddpCk);
        const Plan p = plan(*plainCk, fromJson(R"({"add_prefix":"module."})"));
        QCOMPARE(keysOf(p.arena, p.root), keysOf(ddpCk->arena, ddpCk->root));
        QCOMPARE(metadataOf(p.arena, p.root), metadataOf(ddpCk->arena, ddpCk->root));
        const Plan m = plan(*plainCk, ckpt::transform::multiCardPreset());
        QCOMPARE(keysOf(m.arena, m.root), withPrefix("module.", kConvNetKeys));
        QCOMPARE(metadataOf(m.arena, m.root), metadataOf(ddpCk->arena, ddpCk->root));
        // Already multi-card: nothing to change.
        QVERIFY(plan(*ddpCk, ckpt::transform::multiCardPreset()).changesNothing());
    }

    void presetsStripEveryWrapper_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("module.") << QStringLiteral("ddp_sd.pt");
        QTest::newRow("module.module.") << QStringLiteral("nested_prefix.pt");
        QTest::newRow("_orig_mod.") << QStringLiteral("compile_sd.pt");
        QTest::newRow("cuda:0 + module.") << QStringLiteral("ddp_sd_cuda0.pt");
        QTest::newRow("mixed") << QStringLiteral("mixed_prefix.pt");
        QTest::newRow("whole model") << QStringLiteral("whole_model.pt");
        QTest::newRow("whole DataParallel") << QStringLiteral("whole_model_dp.pt");
        QTest::newRow("legacy whole model") << QStringLiteral("legacy_whole_model.pt");
    }
    void presetsStripEveryWrapper()
    {
        QFETCH(QString, file);
        auto c = open(fixture(file.toLatin1().constData()));
        QVERIFY(c);
        const Plan s = plan(*c, ckpt::transform::singleCardPreset());
        QCOMPARE(keysOf(s.arena, s.root), kConvNetKeys);
        const Plan m = plan(*c, ckpt::transform::multiCardPreset());
        QCOMPARE(keysOf(m.arena, m.root), withPrefix("module.", kConvNetKeys));
        for (const auto& st : s.storages) {
            QCOMPARE(st.location, std::string("cpu"));
        }
        QCOMPARE(s.tensorCount, std::uint64_t{9});
    }

    void prefixIsAnchored()
    {
        auto c = open(fixture("inner_module_name.pt"));
        QVERIFY(c);
        const Plan p = plan(*c, fromJson(R"({"strip_prefix":"module."})"));
        QVERIFY(p.changesNothing());
        QCOMPARE(keysOf(p.arena, p.root), keysOf(c->arena, c->root));
        QVERIFY(keysOf(p.arena, p.root).front().starts_with("mlp_module.layer0"));
    }

    void collisionNamesBothKeys()
    {
        auto c = open(fixture("mixed_prefix.pt"));
        QVERIFY(c);
        QVERIFY(makePlan(*c, fromJson(R"({"strip_prefix":"module."})")).ok());  // mixed alone: no two keys meet
        // `module.conv.weight` and `module.bn.weight` both become `weight`.
        auto clash = makePlan(*c, fromJson(R"({"strip_prefix":["module.conv.","module.bn."]})"));
        QVERIFY(!clash.ok());
        QCOMPARE(clash.error().code, ckpt::ErrorCode::Usage);
        QVERIFY2(clash.error().message.find("'module.conv.weight' and 'module.bn.weight' would both become 'weight'") !=
                     std::string::npos,
                 clash.error().message.c_str());
    }

    void selectAndDrop()
    {
        auto c = open(fixture("train_ckpt.pt"));
        QVERIFY(c);
        const Plan sel = plan(*c, fromJson(R"({"select":"model","strip_prefix":"module."})"));
        QCOMPARE(sel.steps.front().kind, StepKind::Select);
        QCOMPARE(keysOf(sel.arena, sel.root), kConvNetKeys);
        QCOMPARE(sel.storages.size(), std::size_t{9});  // optimizer state is not written
        QCOMPARE(sel.steps.back().kind, StepKind::Note);

        const Plan dropped = plan(*c, fromJson(R"({"drop":["optimizer","args"]})"));
        const auto keys = keysOf(dropped.arena, dropped.root);
        QVERIFY(std::find(keys.begin(), keys.end(), "optimizer") == keys.end());
        QVERIFY(std::find(keys.begin(), keys.end(), "args") == keys.end());
        QVERIFY(std::find(keys.begin(), keys.end(), "model") != keys.end());
        QCOMPARE(count(dropped, StepKind::Drop), std::size_t{2});

        auto missing = makePlan(*c, fromJson(R"({"drop":["no_such_key"]})"));
        QVERIFY(!missing.ok());
        QCOMPARE(missing.error().code, ckpt::ErrorCode::Usage);
        QVERIFY(missing.error().message.find("no_such_key") != std::string::npos);
        auto badSelect = makePlan(*c, fromJson(R"({"select":"modle"})"));
        QVERIFY(!badSelect.ok());
        QVERIFY(badSelect.error().message.find("'modle'") != std::string::npos);

        // A drop path relative to the selected value, and one outside it (already not written).
        const Plan rel = plan(*c, fromJson(R"({"select":"model","drop":["module.fc.bias","optimizer"]})"));
        QCOMPARE(count(rel, StepKind::Drop), std::size_t{1});
        QCOMPARE(keysOf(rel.arena, rel.root).size(), std::size_t{8});
    }

    void unwrapGivesStateDictNames()
    {
        auto c = open(fixture("whole_model_buffers.pt"));
        QVERIFY(c);
        const Plan p = plan(*c, fromJson(R"({"unwrap":true})"));
        // The root's own persistent buffer comes before its children's keys; `mask` is non-persistent.
        auto want = kConvNetKeys;
        want.insert(want.begin(), "scale");
        QCOMPARE(keysOf(p.arena, p.root), want);
        QVERIFY(p.arena[p.root].flag);  // an OrderedDict
        for (std::size_t i = 1; i < p.arena[p.root].items.size(); i += 2) {
            const auto& t = pk::tensorOf(p.arena, p.arena[p.root].items[i]);
            QVERIFY(!t.isParameter);
            QVERIFY(!t.requiresGrad);
        }
        QCOMPARE(count(p, StepKind::Unwrap), std::size_t{1});

        auto dp = open(fixture("whole_model_dp.pt"));
        QVERIFY(dp);
        const Plan u = plan(*dp, fromJson(R"({"unwrap":true})"));
        QCOMPARE(keysOf(u.arena, u.root), kConvNetKeys);
    }

    void weightsOnlyConvertsOrDrops()
    {
        auto c = open(fixture("numpy_namespace.pt"));
        QVERIFY(c);
        const Plan p = plan(*c, fromJson(R"({"weights_only":true})"));
        const pk::Arena& a = p.arena;
        QCOMPARE(a[at(a, p.root, "args")].kind, pk::Kind::Dict);
        QCOMPARE(a[at(a, p.root, "np_float")].kind, pk::Kind::Float);
        QCOMPARE(a[at(a, p.root, "np_int")].kind, pk::Kind::Int);
        // A numeric array becomes a tensor of the same shape (torch.from_numpy), nothing is dropped.
        const auto arr = at(a, p.root, "np_array");
        QCOMPARE(a[arr].kind, pk::Kind::Tensor);
        QCOMPARE(pk::tensorOf(a, arr).shape, (std::vector<std::int64_t>{2, 3}));
        QCOMPARE(pk::tensorOf(a, arr).dtype, ckpt::DType::Float32);
        QCOMPARE(count(p, StepKind::Convert), std::size_t{4});
        QCOMPARE(count(p, StepKind::Drop), std::size_t{0});
        QCOMPARE(p.droppedCount(), std::uint64_t{0});
        // Without --weights-only the same values stay as they are.
        QVERIFY(plan(*c, Options{}).changesNothing());
    }

    void unsafeCallablesAlwaysDropped()
    {
        for (const char* f : {"unsafe_os_system.pt", "unsafe_eval.pt"}) {
            auto c = open(fixture(f));
            QVERIFY(c);
            const Plan p = plan(*c, Options{});
            QCOMPARE(count(p, StepKind::Drop), std::size_t{1});
            QVERIFY(!at(p.arena, p.root, "payload").valid());
            QVERIFY(p.steps.front().detail.find("never written") != std::string::npos);
        }
    }

    void mapLocationPairs()
    {
        auto c = open(fixture("multi_gpu.pt"));
        QVERIFY(c);
        const Plan p = plan(*c, fromJson(R"({"map_location":"cuda:0=cuda:1,cuda:2=cpu"})"));
        std::map<std::string, int> byLocation;
        for (const auto& s : p.storages) {
            ++byLocation[s.location];
            QCOMPARE(p.arena.storages[&s - p.storages.data()].location, s.location);
        }
        const std::map<std::string, int> want = {{"cpu", 2}, {"cuda:1", 4}, {"cuda:3", 2}};
        QCOMPARE(byLocation, want);
        QCOMPARE(count(p, StepKind::Remap), std::size_t{2});
    }

    void compactShrinksStoragesAndKeepsSharing()
    {
        auto c = open(fixture("views.pt"));
        QVERIFY(c);
        const Plan p = plan(*c, fromJson(R"({"compact":true})"));
        QVERIFY(count(p, StepKind::Compact) >= 1);
        const pk::Arena& a = p.arena;
        const auto& small = pk::tensorOf(a, at(a, p.root, "small"));
        const auto storage = static_cast<std::size_t>(a[small.storage].i);
        QCOMPARE(p.storages[storage].nbytes, std::uint64_t{2 * 64 * 4});
        QCOMPARE(a.storages[storage].numel, std::uint64_t{2 * 64});
        // Every tensor still lies inside its (possibly shrunk) storage; tied tensors still share one.
        for (std::size_t i = 1; i < a[p.root].items.size(); i += 2) {
            const auto& t = pk::tensorOf(a, a[p.root].items[i]);
            std::int64_t last = t.storageOffset;
            for (std::size_t d = 0; d < t.shape.size(); ++d) {
                last += (t.shape[d] - 1) * t.stride[d];
            }
            QVERIFY(static_cast<std::uint64_t>(last) < a.storages[static_cast<std::size_t>(a[t.storage].i)].numel);
        }
        const auto& ta = pk::tensorOf(a, at(a, p.root, "tied_a"));
        const auto& tb = pk::tensorOf(a, at(a, p.root, "tied_b"));
        QCOMPARE(a[ta.storage].i, a[tb.storage].i);
    }

    void planJsonShape()
    {
        auto c = open(fixture("ddp_sd_cuda0.pt"));
        QVERIFY(c);
        const Plan p = plan(*c, ckpt::transform::singleCardPreset());
        const QJsonObject j = QJsonDocument::fromJson(QByteArray::fromStdString(p.toJson())).object();
        QCOMPARE(j.value(QStringLiteral("schema")).toInt(), 2);
        QCOMPARE(j.value(QStringLiteral("tensors")).toInt(), 9);
        const QJsonArray steps = j.value(QStringLiteral("steps")).toArray();
        QCOMPARE(steps.size(), 11);  // 9 keys + _metadata + one remap
        const QJsonObject remap = steps.last().toObject();
        QCOMPARE(remap.value(QStringLiteral("kind")).toString(), QStringLiteral("remap"));
        QCOMPARE(remap.value(QStringLiteral("before")).toString(), QStringLiteral("cuda:0"));
        QCOMPARE(remap.value(QStringLiteral("after")).toString(), QStringLiteral("cpu"));
        for (const auto& key : {"kind", "path", "before", "after", "detail"}) {
            QVERIFY(steps.first().toObject().contains(QString::fromLatin1(key)));
        }
        QCOMPARE(j.value(QStringLiteral("storages")).toArray().size(), 9);
        QCOMPARE(j.value(QStringLiteral("storages"))
                     .toArray()
                     .first()
                     .toObject()
                     .value(QStringLiteral("location"))
                     .toString(),
                 QStringLiteral("cpu"));
    }
};

QTEST_GUILESS_MAIN(TestTransformPlan)
#include "tst_transform_plan.moc"
