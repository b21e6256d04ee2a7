// What ckptscope says of files people open by mistake or that torch.load cannot reach, and of values
// it used to show badly (issue 25's messages), on files their real writers make at test time:
// PyTorch 1.13 (torch.save, numpy, pathlib, AllenNLP's archive layout with Python's tarfile) and a
// Torch7 file written as Lua Torch's File.lua writes one (tests/fixtures/write_torch7.py).
#include "cli_json.h"

#include <QDir>
#include <QJsonArray>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <tuple>

namespace {

using ckpt::test::ckptscope;
using ckpt::test::findingCodes;
using ckpt::test::jsonOf;

// Runs `script` with PyTorch 1.13's python, `args` as sys.argv[1:]; its stdout, or a failure.
QString python(const QString& script, const QStringList& args = {})
{
    QProcess py;
    py.start(QStringLiteral(CKPTSCOPE_PYTHON), QStringList{QStringLiteral("-c"), script} + args);
    if (!py.waitForFinished(180000) || py.exitCode() != 0) {
        QTest::qFail(qPrintable(QStringLiteral("python failed: ") + QString::fromUtf8(py.readAllStandardError())),
                     __FILE__, __LINE__);
        return {};
    }
    return QString::fromUtf8(py.readAllStandardOutput()).trimmed();
}

// The line of `text` that starts with `prefix` (a row of inspect's table), or "".
std::string lineStarting(const std::string& text, const std::string& prefix)
{
    for (std::size_t at = 0; at < text.size();) {
        const std::size_t end = std::min(text.find('\n', at), text.size());
        if (text.compare(at, prefix.size(), prefix) == 0) {
            return text.substr(at, end - at);
        }
        at = end + 1;
    }
    return {};
}

// The JSON object of inspect --json's `objects` entry at `path`.
QJsonObject objectAt(const QJsonObject& doc, const QString& path)
{
    for (const auto& o : doc.value(QStringLiteral("objects")).toArray()) {
        if (o.toObject().value(QStringLiteral("path")).toString() == path) {
            return o.toObject();
        }
    }
    return {};
}

}  // namespace

class TestMessages : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void torch7FileIsNamed();
    void allenNlpArchiveOpensItsWeights();
    void numpyScalarsAndPathsShowTheirValue();

private:
    QTemporaryDir m_dir;
    std::string path(const char* name) const { return m_dir.filePath(QString::fromLatin1(name)).toStdString(); }
};

void TestMessages::initTestCase()
{
    QVERIFY(m_dir.isValid());
}

// A Lua Torch7 file was "not a PyTorch checkpoint (first bytes: 03 00 00 00 ...)": it is named, with
// what reads it today.
void TestMessages::torch7FileIsNamed()
{
    QProcess py;
    py.start(QStringLiteral(CKPTSCOPE_PYTHON),
             {QStringLiteral(CKPTSCOPE_SOURCE_DIR "/tests/fixtures/write_torch7.py"), m_dir.path()});
    QVERIFY(py.waitForFinished(60000));
    QCOMPARE(py.exitCode(), 0);
    for (const auto& [file, first] :
         {std::pair{"table.t7", "a Lua table of 3 entries"}, std::pair{"tensor.t7", "a torch.FloatTensor"}}) {
        const auto r = ckptscope({"inspect", path(file)});
        QCOMPARE(r.rc, 2);
        QVERIFY2(r.err.find("is a Lua Torch7 file") != std::string::npos, r.err.c_str());
        QVERIFY2(r.err.find(first) != std::string::npos, r.err.c_str());
        QVERIFY2(r.err.find("torchfile") != std::string::npos && r.err.find("load_lua") != std::string::npos,
                 r.err.c_str());
        QVERIFY2(r.err.find("first bytes") == std::string::npos, r.err.c_str());
    }
}

// AllenNLP's model.tar.gz (weights.th, config.json, vocabulary/ as archive_model tars them) was "a
// tar archive without the members 'storages', 'tensors' and 'pickle'": its weights.th is read and
// named, gzipped or not, and convert writes the checkpoint torch.load reads.
void TestMessages::allenNlpArchiveOpensItsWeights()
{
    const QString keys = python(QStringLiteral(R"(
import json, os, sys, tarfile, torch
out = sys.argv[1]
work = os.path.join(out, "serialization")
os.makedirs(os.path.join(work, "vocabulary"), exist_ok=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 2))
torch.save(model.state_dict(), os.path.join(work, "weights.th"))
with open(os.path.join(work, "config.json"), "w") as f:
    json.dump({"model": {"type": "basic_classifier"}}, f)
with open(os.path.join(work, "vocabulary", "tokens.txt"), "w") as f:
    f.write("@@UNKNOWN@@\nthe\n")
for name, mode in (("model.tar.gz", "w:gz"), ("model.tar", "w")):
    with tarfile.open(os.path.join(out, name), mode) as archive:  # allennlp archival.archive_model
        archive.add(os.path.join(work, "config.json"), arcname="config.json")
        archive.add(os.path.join(work, "weights.th"), arcname="weights.th")
        archive.add(os.path.join(work, "vocabulary"), arcname="vocabulary")
print(",".join(model.state_dict().keys()))
)"),
                                {m_dir.path()});
    QCOMPARE(keys, QStringLiteral("0.weight,1.weight,1.bias"));
    for (const char* file : {"model.tar.gz", "model.tar"}) {
        auto r = ckptscope({"inspect", "--json", path(file)});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QStringList paths;
        for (const auto& t : jsonOf(r).value(QStringLiteral("tensors")).toArray()) {
            paths << t.toObject().value(QStringLiteral("path")).toString();
        }
        QCOMPARE(paths.join(QLatin1Char(',')), keys);
        r = ckptscope({"inspect", path(file)});
        QVERIFY2(r.out.find("AllenNLP model archive: shown is its member 'weights.th'") != std::string::npos,
                 r.out.c_str());
        r = ckptscope({"check", "--json", path(file)});
        QCOMPARE(findingCodes(r), QStringList{QStringLiteral("archive-member")});
        // The fix writes a plain torch zip: named .pt, not .tar.gz.
        r = ckptscope({"check", path(file)});
        QVERIFY2(r.out.find(" -o " + path("model.fixed.pt")) != std::string::npos, r.out.c_str());
        const std::string out = path(file) + ".pt";
        r = ckptscope({"convert", path(file), "-o", out});
        QVERIFY2(r.rc == 0, r.err.c_str());
        QCOMPARE(python(QStringLiteral("import sys, torch; print(','.join(torch.load(sys.argv[1]).keys()))"),
                        {QString::fromStdString(out)}),
                 keys);
    }
}

// torch 1.13 pickles np.float64(0.7) as numpy.core.multiarray.scalar(dtype, raw bytes) and a path as
// pathlib.PosixPath('/', 'runs', ...): both showed their reconstruct arguments in inspect (and
// nothing in the window). They show the value in inspect's table and its JSON; diff calls a numpy
// scalar that became a float a type change: the same value held in another class, so the same
// weights (exit 0) unless --strict.
void TestMessages::numpyScalarsAndPathsShowTheirValue()
{
    const QString written =
        python(QStringLiteral(R"(
import pathlib, sys, numpy as np, torch
values = {"np_f64": np.float64(0.7), "np_f32": np.float32(0.7), "np_int": np.int64(-3),
          "np_bool": np.bool_(True), "np_c64": np.complex64(1 - 2j), "path": pathlib.PosixPath("/runs/exp1/ckpt.pt"),
          "relative": pathlib.PurePosixPath("runs/x")}
torch.save(values, sys.argv[1])
values["np_f64"] = 0.7
torch.save(values, sys.argv[2])
print(str(values["path"]))
)"),
               {m_dir.filePath(QStringLiteral("values.pt")), m_dir.filePath(QStringLiteral("floats.pt"))});
    QCOMPARE(written, QStringLiteral("/runs/exp1/ckpt.pt"));
    auto r = ckptscope({"inspect", path("values.pt")});
    QCOMPARE(r.rc, 0);
    for (const auto& [key, type, value] :
         {std::tuple{"np_f64 ", "numpy.float64", " 0.7 "}, std::tuple{"np_f32 ", "numpy.float32", " 0.7 "},
          std::tuple{"path ", "pathlib.PosixPath", "PosixPath('/runs/exp1/ckpt.pt')"}}) {
        const std::string row = lineStarting(r.out, key);
        QVERIFY2(row.find(type) != std::string::npos && row.find(value) != std::string::npos, row.c_str());
    }
    QVERIFY2(r.out.find("multiarray.scalar") == std::string::npos, r.out.c_str());
    const auto doc = jsonOf(ckptscope({"inspect", "--json", path("values.pt")}));
    const std::pair<const char*, const char*> expected[] = {{"np_f64", "0.7"},
                                                            {"np_f32", "0.7"},
                                                            {"np_int", "-3"},
                                                            {"np_bool", "True"},
                                                            {"np_c64", "(1-2j)"},
                                                            {"path", "PosixPath('/runs/exp1/ckpt.pt')"},
                                                            {"relative", "PurePosixPath('runs/x')"}};
    for (const auto& [key, value] : expected) {
        QCOMPARE(objectAt(doc, QString::fromLatin1(key)).value(QStringLiteral("value")).toString(),
                 QString::fromLatin1(value));
    }
    r = ckptscope({"diff", path("values.pt"), path("floats.pt")});
    QCOMPARE(r.rc, 0);
    QVERIFY2(r.out.find("numpy.float64 -> float") != std::string::npos, r.out.c_str());
    QVERIFY2(r.out.find("1 held in another class") != std::string::npos, r.out.c_str());
    QCOMPARE(ckptscope({"diff", path("values.pt"), path("floats.pt"), "--strict"}).rc, 1);
}

QTEST_GUILESS_MAIN(TestMessages)
#include "tst_messages.moc"
