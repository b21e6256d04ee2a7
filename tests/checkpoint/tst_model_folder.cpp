// Folders that hold one model beside a run's state (core/checkpoint/model_folder.h): which layouts
// are recognised from their file names, which file is the model, and openCheckpoint(DIR) opening
// it. The real writers' folders (accelerate, transformers' Trainer, save_pretrained) are checked
// against PyTorch 2.14 by tests/torch2/torch2_folders.py; these are the rules' edges.
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_folder.h"
#include "util/printable.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

using namespace ckpt;

namespace {

QString fixture(const char* name)
{
    return QDir(QStringLiteral(CKPTSCOPE_FIXTURE_DIR)).filePath(QString::fromLatin1(name));
}

void touch(const QString& path)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("x");
}

QStringList names(std::initializer_list<const char*> list)
{
    QStringList out;
    for (const char* n : list) {
        out << QString::fromLatin1(n);
    }
    return out;
}

std::string roleIn(const ModelFolder& f, const std::string& name)
{
    for (const auto& m : f.members) {
        if (m.name == name) {
            return m.role;
        }
    }
    return {};
}

}  // namespace

class TestModelFolder : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void layoutsAndTheirModel_data()
    {
        QTest::addColumn<QStringList>("files");
        QTest::addColumn<QString>("layout");
        QTest::addColumn<QString>("model");
        QTest::newRow("accelerate") << names({"model.safetensors", "optimizer.bin", "scheduler.bin",
                                              "random_states_0.pkl", "scaler.pt"})
                                    << QStringLiteral("accelerate save_state") << QStringLiteral("model.safetensors");
        QTest::newRow("accelerate .bin") << names({"pytorch_model.bin", "optimizer.bin", "random_states_0.pkl",
                                                   "random_states_1.pkl"})
                                         << QStringLiteral("accelerate save_state")
                                         << QStringLiteral("pytorch_model.bin");
        QTest::newRow("accelerate, two models")
            << names({"model.safetensors", "model_1.safetensors", "optimizer.bin", "optimizer_1.bin"})
            << QStringLiteral("accelerate save_state") << QStringLiteral("");
        QTest::newRow("peft") << names({"adapter_model.safetensors", "adapter_config.json", "README.md"})
                              << QStringLiteral("PEFT adapter") << QStringLiteral("adapter_model.safetensors");
        QTest::newRow("trainer, safetensors and its .bin twin")
            << names({"model.safetensors", "pytorch_model.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                      "trainer_state.json", "training_args.bin"})
            << QStringLiteral("Trainer checkpoint") << QStringLiteral("model.safetensors");
        QTest::newRow("trainer, weights elsewhere") << names({"optimizer.pt", "trainer_state.json"})
                                                    << QStringLiteral("Trainer checkpoint") << QStringLiteral("");
        QTest::newRow("olmo") << names({"model.pt", "optim.pt", "train.pt", "config.yaml"})
                              << QStringLiteral("training checkpoint folder") << QStringLiteral("model.pt");
        QTest::newRow("save_pretrained") << names({"config.json", "model.safetensors", "generation_config.json"})
                                         << QStringLiteral("Hugging Face model folder")
                                         << QStringLiteral("model.safetensors");
    }
    void layoutsAndTheirModel()
    {
        QFETCH(QStringList, files);
        QFETCH(QString, layout);
        QFETCH(QString, model);
        QTemporaryDir dir;
        for (const auto& f : files) {
            touch(dir.filePath(f));
        }
        const auto folder = readModelFolder(dir.path().toStdString());
        QVERIFY(folder);
        QVERIFY2(folder->layout.find(layout.toStdString()) != std::string::npos, folder->layout.c_str());
        QCOMPARE(QString::fromStdString(folder->model()), model);
        if (model.isEmpty()) {
            const auto refused = modelFileOf(*folder);
            QVERIFY(!refused);
            QCOMPARE(refused.error().code, ErrorCode::Usage);
            QVERIFY(refused.error().message.find('\n') == std::string::npos);
            QVERIFY2(refused.error().message.find(files.first().toStdString()) != std::string::npos,
                     refused.error().message.c_str());
        }
    }

    // Roles are named as their writers name the files; a file no such writer makes is left out.
    void rolesByName()
    {
        QTemporaryDir dir;
        for (const char* f :
             {"model.safetensors", "optimizer.bin", "scheduler_1.bin", "sampler.bin", "random_states_3.pkl",
              "custom_checkpoint_0.pkl", "dl_state_dict.bin", "notes.txt", "optimizer_x.bin"}) {
            touch(dir.filePath(QString::fromLatin1(f)));
        }
        const auto folder = readModelFolder(dir.path().toStdString());
        QVERIFY(folder);
        QCOMPARE(roleIn(*folder, "optimizer.bin"), std::string("optimizer"));
        QCOMPARE(roleIn(*folder, "scheduler_1.bin"), std::string("scheduler"));
        QCOMPARE(roleIn(*folder, "sampler.bin"), std::string("sampler"));
        QCOMPARE(roleIn(*folder, "random_states_3.pkl"), std::string("RNG state"));
        QCOMPARE(roleIn(*folder, "custom_checkpoint_0.pkl"), std::string("custom state"));
        QCOMPARE(roleIn(*folder, "dl_state_dict.bin"), std::string("dataloader state"));
        QCOMPARE(roleIn(*folder, "notes.txt"), std::string());
        QCOMPARE(roleIn(*folder, "optimizer_x.bin"), std::string());
    }

    // adapter_config.json's base model and adapter, read safely: a hostile file's texts are cut
    // (and shown only through displayText), a file past the limit or not JSON is named as unread.
    void adapterConfigIsReadSafely()
    {
        QTemporaryDir dir;
        touch(dir.filePath(QStringLiteral("adapter_model.safetensors")));
        auto write = [&](const QByteArray& text) {
            QFile f(dir.filePath(QStringLiteral("adapter_config.json")));
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            f.write(text);
        };
        write("{\"base_model_name_or_path\": \"meta-llama/Llama-3.2-1B\", \"peft_type\": \"LORA\", \"r\": 16, "
              "\"target_modules\": [\"q_proj\", \"v_proj\"]}");
        auto folder = readModelFolder(dir.path().toStdString());
        QVERIFY(folder && folder->adapterConfig);
        QCOMPARE(folder->adapterConfig->baseModel, std::string("meta-llama/Llama-3.2-1B"));
        QCOMPARE(adapterSummary(*folder->adapterConfig),
                 std::string("base model 'meta-llama/Llama-3.2-1B' (adapter_config.json base_model_name_or_path); "
                             "LORA, r 16, target modules q_proj, v_proj"));

        // An escape sequence and a name of 10,000 bytes; 40 target modules; r given as text.
        QByteArray hostile = "{\"base_model_name_or_path\": \"\\u001b]0;pwned\\u0007" + QByteArray(10000, 'x') +
                             "\", \"r\": \"8\", \"target_modules\": [";
        for (int i = 0; i < 40; ++i) {
            hostile += (i ? ", \"m" : "\"m") + QByteArray::number(i) + '"';
        }
        write(hostile + "]}");
        folder = readModelFolder(dir.path().toStdString());
        QVERIFY(folder && folder->adapterConfig);
        const AdapterConfig& a = *folder->adapterConfig;
        QVERIFY(a.problem.empty());
        QVERIFY(a.baseModel.size() <= kMaxAdapterText + 3 && a.baseModel.ends_with("..."));
        QVERIFY(!a.rank);
        QCOMPARE(a.targetModules.size(), kMaxAdapterModules);
        QCOMPARE(a.moreModules, std::size_t{40} - kMaxAdapterModules);
        const std::string shown = displayText(adapterSummary(a));
        QVERIFY2(shown.find('\x1b') == std::string::npos && shown.find('\a') == std::string::npos, shown.c_str());
        QVERIFY2(shown.find("and 24 more") != std::string::npos, shown.c_str());

        write("not json");
        folder = readModelFolder(dir.path().toStdString());
        QVERIFY(folder && folder->adapterConfig);
        QCOMPARE(folder->adapterConfig->problem, std::string("adapter_config.json is not a JSON object"));
        write(QByteArray(static_cast<qsizetype>(kMaxAdapterConfigBytes) + 1, ' '));
        folder = readModelFolder(dir.path().toStdString());
        QVERIFY(folder && folder->adapterConfig);
        QVERIFY2(folder->adapterConfig->problem.starts_with("adapter_config.json cannot be read"),
                 folder->adapterConfig->problem.c_str());
        QVERIFY(adapterSummary(*folder->adapterConfig).ends_with("so the base model it needs is not known"));
    }

    // A model file alone, or unrelated checkpoints, make no such folder: the folder stays a folder.
    void notSuchAFolder()
    {
        QTemporaryDir dir;
        QVERIFY(!readModelFolder(dir.path().toStdString()));
        touch(dir.filePath(QStringLiteral("model.pt")));
        touch(dir.filePath(QStringLiteral("epoch3.pt")));
        QVERIFY(!readModelFolder(dir.path().toStdString()));
        QVERIFY(!readModelFolder(dir.filePath(QStringLiteral("model.pt")).toStdString()));
        const auto opened = openCheckpoint(dir.path().toStdString());
        QVERIFY(!opened);
        QVERIFY2(opened.error().message.find("is a directory") != std::string::npos, opened.error().message.c_str());
    }

    // openCheckpoint(DIR) is the model, with the folder kept; the path is the model file's, so an
    // export over it is refused as an export over its input.
    void opensTheModel()
    {
        QTemporaryDir dir;
        QVERIFY(QFile::copy(fixture("plain_sd.pt"), dir.filePath(QStringLiteral("model.pt"))));
        touch(dir.filePath(QStringLiteral("optim.pt")));
        touch(dir.filePath(QStringLiteral("train.pt")));
        const auto direct = openCheckpoint(dir.filePath(QStringLiteral("model.pt")).toStdString());
        const auto viaFolder = openCheckpoint(dir.path().toStdString());
        QVERIFY(direct);
        QVERIFY2(viaFolder, viaFolder ? "" : viaFolder.error().describe().c_str());
        QCOMPARE((*viaFolder)->tensors.size(), (*direct)->tensors.size());
        QCOMPARE((*viaFolder)->path, dir.filePath(QStringLiteral("model.pt")).toStdString());
        QVERIFY((*viaFolder)->folder);
        QVERIFY(!(*direct)->folder);
        QCOMPARE((*viaFolder)->folder->memberList(),
                 std::string("model.pt (model), optim.pt (optimizer), train.pt (training state)"));
    }

    // A model that cannot be read names the folder and the file; one that leads outside the folder
    // is refused without reading it (the set rule, util/folder_member.h).
    void errorsNameTheFolderAndTheFile()
    {
        QTemporaryDir dir;
        touch(dir.filePath(QStringLiteral("model.pt")));
        touch(dir.filePath(QStringLiteral("optim.pt")));
        auto opened = openCheckpoint(dir.path().toStdString());
        QVERIFY(!opened);
        QVERIFY2(opened.error().message.find("of separate files; its model model.pt: ") != std::string::npos,
                 opened.error().message.c_str());

        QTemporaryDir outside;
        QVERIFY(QFile::copy(fixture("plain_sd.pt"), outside.filePath(QStringLiteral("secret.pt"))));
        QVERIFY(QFile::remove(dir.filePath(QStringLiteral("model.pt"))));
        QVERIFY(QFile::link(outside.filePath(QStringLiteral("secret.pt")), dir.filePath(QStringLiteral("model.pt"))));
        opened = openCheckpoint(dir.path().toStdString());
        QVERIFY(!opened);
        QVERIFY2(opened.error().message.find("outside") != std::string::npos, opened.error().message.c_str());
    }
};

QTEST_GUILESS_MAIN(TestModelFolder)
#include "tst_model_folder.moc"
