// Inputs and outputs that are not what their names say (issue 39): `convert` refuses an output whose
// extension contradicts an explicit --format (a safetensors file named llama.pt loads in no torch.load
// and `check` calls it fine), a text file such as /etc/hostname is named a text file rather than "a
// truncated checkpoint", and an empty folder is said to be one.
#include "cli_run.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>

namespace {

using ckpt::test::ckptscope;

std::string fixture(const char* name)
{
    return std::string(CKPTSCOPE_FIXTURE_DIR) + "/" + name;
}

bool contains(const std::string& text, const std::string& part)
{
    return text.find(part) != std::string::npos;
}

long lines(const std::string& text)
{
    return std::count(text.begin(), text.end(), '\n');
}

std::string write(const QTemporaryDir& dir, const char* name, const QByteArray& bytes)
{
    const QString path = dir.filePath(QLatin1String(name));
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(bytes) != bytes.size()) {
        return {};
    }
    return path.toStdString();
}

}  // namespace

class TestMisnamed : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // --format safetensors into llama.pt (and torch into .safetensors) is refused in one line, exit 2,
    // nothing written; the name that agrees is offered. A name that agrees, or says nothing, is fine.
    void convertRefusesAnExtensionThatContradictsTheFormat()
    {
        QTemporaryDir dir;
        const std::string in = fixture("ddp_sd_cuda0.pt");
        const std::string pt = dir.filePath(QStringLiteral("llama.pt")).toStdString();
        auto r = ckptscope({"convert", in, "-o", pt, "--format", "safetensors"});
        QCOMPARE(r.rc, 2);
        QCOMPARE(lines(r.err), 1L);
        QVERIFY2(contains(r.err, "llama.pt is a torch.save name") && contains(r.err, "llama.safetensors"),
                 r.err.c_str());
        QVERIFY(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());

        const std::string st = dir.filePath(QStringLiteral("model.safetensors")).toStdString();
        r = ckptscope({"convert", in, "-o", st, "--format", "torch", "--single-card"});
        QCOMPARE(r.rc, 2);
        QVERIFY2(contains(r.err, "model.safetensors is a safetensors name") && contains(r.err, "model.pt"),
                 r.err.c_str());
        QVERIFY(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).isEmpty());

        // Upper case is the same name.
        r = ckptscope({"convert", in, "-o", dir.filePath(QStringLiteral("LLAMA.PTH")).toStdString(), "--format",
                       "safetensors", "--single-card"});
        QCOMPARE(r.rc, 2);

        // What agrees is written: an explicit format under its own name, a name that picks the
        // format, and a name that says nothing of it.
        for (const auto& [name, format] : {std::pair{"a.safetensors", "safetensors"}, std::pair{"b.pt", "torch"},
                                           std::pair{"c.safetensors", ""}, std::pair{"d.model", "safetensors"}}) {
            std::vector<std::string> args{"convert", in, "-o", dir.filePath(QLatin1String(name)).toStdString(),
                                          "--single-card"};
            if (*format != '\0') {
                args.insert(args.end(), {"--format", format});
            }
            r = ckptscope(args);
            QVERIFY2(r.rc == 0, (std::string(name) + ": " + r.err).c_str());
            QVERIFY(QFileInfo::exists(dir.filePath(QLatin1String(name))));
        }
    }

    // /etc/hostname was "is 7 bytes, shorter than any checkpoint: truncated (an interrupted save or
    // download?)": it is a text file, and so is a README that starts like a protocol-0 pickle ('I').
    void aTextFileIsNamedAsOne()
    {
        QTemporaryDir dir;
        const auto host = write(dir, "hostname", "buildbox\n");
        auto r = ckptscope({"inspect", host});
        QCOMPARE(r.rc, 2);
        QCOMPARE(lines(r.err), 1L);
        QVERIFY2(contains(r.err, "is a text file, not a PyTorch checkpoint (it begins \"buildbox\")"), r.err.c_str());
        QVERIFY2(!contains(r.err, "truncated"), r.err.c_str());

        const auto readme = write(dir, "README.pt", "Introduction\n\nThis folder holds the weights of ...\n");
        r = ckptscope({"check", readme});
        QCOMPARE(r.rc, 2);
        QVERIFY2(contains(r.err, "is a text file") && contains(r.err, "Introduction"), r.err.c_str());

        const QByteArray longLine(200, 'x');
        const auto config = write(dir, "config.bin", "{\"model_type\": \"llama\", \"pad\": \"" + longLine + "\"}\n");
        r = ckptscope({"inspect", config});
        QVERIFY2(contains(r.err, "is a text file") && contains(r.err, "…\")"), r.err.c_str());

        // Bytes that are no text keep their own messages.
        const auto tiny = write(dir, "tiny.pt", QByteArray("\x80\x02}", 3));
        r = ckptscope({"inspect", tiny});
        QVERIFY2(contains(r.err, "shorter than any checkpoint: truncated"), r.err.c_str());
    }

    // An empty folder was "is a directory, and none of the checkpoint sets ckptscope reads (...)".
    void anEmptyFolderIsSaidToBeEmpty()
    {
        QTemporaryDir dir;
        for (const char* cmd : {"inspect", "check"}) {
            const auto r = ckptscope({cmd, dir.path().toStdString()});
            QCOMPARE(r.rc, 2);
            QCOMPARE(lines(r.err), 1L);
            QVERIFY2(contains(r.err, "is an empty folder: there is no checkpoint in it"), r.err.c_str());
        }
    }
};

QTEST_GUILESS_MAIN(TestMisnamed)
#include "tst_misnamed.moc"
