// The window's key tree against `inspect --json` on every real checkpoint in the shared corpus:
// each row's Kind, dtype, shape and device must say what the command line says about the same key
// path. The window once showed object types against the wrong keys while the JSON was right; only
// a comparison on real, varied files catches a row-to-node mix-up like that.
//
// The corpus is not part of the repository: $CKPTSCOPE_CORPUS_DIR, else ../shared/corpus beside
// the checkout. The test skips when neither exists.
#include "cli/json_out.h"
#include "document.h"
#include "keytreemodel.h"
#include "keytreeproxy.h"
#include "text.h"
#include "uitest.h"

#include <QDir>
#include <QDirIterator>
#include <QFileInfo>
#include <QtTest>

#include <map>
#include <set>
#include <sstream>
#include <string>

using namespace ckpt;
using namespace ckpt::ui;

namespace {

QString corpusDir()
{
    const auto env = qEnvironmentVariable("CKPTSCOPE_CORPUS_DIR");
    return env.isEmpty() ? QStringLiteral(CKPTSCOPE_SOURCE_DIR "/../shared/corpus") : env;
}

struct JsonTensor {
    QString dtype;
    QString shape;
    QString location;
    bool parameter = false;
};

// What inspect --json says, by key path (a path can repeat: "a.b" the key and "a" -> "b").
struct Inspect {
    std::multimap<QString, JsonTensor> tensors;
    std::multimap<QString, QString> objects;  // path -> qualified type
};

Inspect inspectJson(const Checkpoint& ck)
{
    std::ostringstream text;
    cli::writeInspectJson(ck, text);
    const auto json = nlohmann::json::parse(text.str());
    Inspect out;
    for (const auto& t : json.at("tensors")) {
        QStringList dims;
        for (const auto& d : t.at("shape")) {
            dims << QString::number(d.get<std::int64_t>());
        }
        out.tensors.emplace(qs(t.at("path").get<std::string>()),
                            JsonTensor{qs(t.at("dtype").get<std::string>()),
                                       QLatin1Char('[') + dims.join(QStringLiteral(", ")) + QLatin1Char(']'),
                                       qs(t.at("location").get<std::string>()), t.at("parameter").get<bool>()});
    }
    for (const auto& o : json.at("objects")) {
        out.objects.emplace(qs(o.at("path").get<std::string>()), qs(o.at("type").get<std::string>()));
    }
    return out;
}

QString shortType(const QString& qualified)
{
    return qualified.mid(qualified.lastIndexOf(QLatin1Char('.')) + 1);
}

// Every row of the view's model (the proxy, as the window shows it), depth first.
void collect(const QAbstractItemModel& m, const QModelIndex& parent, QList<QModelIndex>& out)
{
    for (int r = 0; r < m.rowCount(parent); ++r) {
        const auto i = m.index(r, 0, parent);
        out << i;
        collect(m, i, out);
    }
}

QString cell(const QModelIndex& name, int column)
{
    return name.sibling(name.row(), column).data().toString();
}

}  // namespace

class TestCorpusTree : public QObject {
    Q_OBJECT
public:
    static void initMain() { uitest::initMain(); }

private Q_SLOTS:
    void rowsAgreeWithInspectJson_data()
    {
        QTest::addColumn<QString>("file");
        const QDir dir(corpusDir());
        if (!dir.exists()) {
            return;
        }
        // Files inside folders too: a Trainer folder's training_args.bin is where the mix-up showed.
        QStringList files;
        QDirIterator it(dir.path(), QDir::Files, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            files << dir.relativeFilePath(it.next());
        }
        files.sort();
        for (const auto& name : files) {
            if (name != QLatin1String("SOURCES.tsv")) {
                QTest::newRow(name.toUtf8().constData()) << dir.filePath(name);
            }
        }
    }

    void rowsAgreeWithInspectJson()
    {
        if (!QDir(corpusDir()).exists()) {
            QSKIP("no corpus (set CKPTSCOPE_CORPUS_DIR)");
        }
        QFETCH(QString, file);
        auto doc = loadDocument(file.toStdString());
        if (!doc) {
            // Folders and damaged files the reader refuses have no tree to compare.
            QSKIP(qPrintable(QStringLiteral("not opened: ") + qs(doc.error().describe())));
        }
        const auto expected = inspectJson(*(*doc)->checkpoint);
        KeyTreeModel model;
        model.setDocument(*doc);
        KeyTreeProxy proxy;
        proxy.setSourceModel(&model);
        proxy.sort(KeyTreeModel::Name, Qt::AscendingOrder);  // rows move: the mapping must hold

        QList<QModelIndex> rows;
        collect(proxy, {}, rows);
        int tensorRows = 0;
        int objectRows = 0;
        std::set<QString> objectPathsSeen;
        for (const auto& row : rows) {
            const auto path = row.data(KeyTreeModel::PathRole).toString();
            const auto kind = cell(row, KeyTreeModel::Kind);
            const auto tensors = expected.tensors.equal_range(path);
            const auto objects = expected.objects.equal_range(path);
            if (kind == QLatin1String("tensor") || kind == QLatin1String("parameter")) {
                ++tensorRows;
                bool agrees = false;
                for (auto it = tensors.first; it != tensors.second && !agrees; ++it) {
                    const auto& t = it->second;
                    agrees = kind == (t.parameter ? QLatin1String("parameter") : QLatin1String("tensor")) &&
                             cell(row, KeyTreeModel::DType) == t.dtype && cell(row, KeyTreeModel::Shape) == t.shape &&
                             cell(row, KeyTreeModel::Device) == t.location;
                }
                QVERIFY2(agrees, qPrintable(QStringLiteral("%1: the tree shows %2 %3 %4 %5, inspect --json does not")
                                                .arg(path, kind, cell(row, KeyTreeModel::DType),
                                                     cell(row, KeyTreeModel::Shape), cell(row, KeyTreeModel::Device))));
                continue;
            }
            QVERIFY2(tensors.first == tensors.second || objects.first != objects.second,
                     qPrintable(QStringLiteral("%1: a tensor in inspect --json, '%2' in the tree").arg(path, kind)));
            if (objects.first == objects.second) {
                continue;
            }
            // An object row names the last part of its type, and the tooltip the whole of it.
            bool agrees = false;
            for (auto it = objects.first; it != objects.second && !agrees; ++it) {
                agrees = kind == shortType(it->second) &&
                         row.data(Qt::ToolTipRole).toString().endsWith(QLatin1Char('\n') + it->second);
            }
            if (kind == QLatin1String("dict") || kind == QLatin1String("OrderedDict") ||
                kind == QLatin1String("state dict") || kind == QLatin1String("list") ||
                kind == QLatin1String("tuple")) {
                continue;  // a container object shown by its contents carries no type in the tree
            }
            QVERIFY2(agrees, qPrintable(QStringLiteral("%1: the tree says '%2', inspect --json says %3")
                                            .arg(path, kind, objects.first->second)));
            ++objectRows;
            objectPathsSeen.insert(path);
        }
        // Every tensor and object inspect lists is a row (the tree hides nothing of them).
        std::set<QString> rowPaths;
        for (const auto& row : rows) {
            rowPaths.insert(row.data(KeyTreeModel::PathRole).toString());
        }
        for (const auto& [path, t] : expected.tensors) {
            QVERIFY2(rowPaths.contains(path), qPrintable(QStringLiteral("tensor %1 has no row").arg(path)));
        }
        qInfo("%s: %d tensor rows, %d object rows agree", qPrintable(QFileInfo(file).fileName()), tensorRows,
              objectRows);
    }
};

QTEST_MAIN(TestCorpusTree)
#include "tst_corpustree.moc"
