#include "dialogs.h"

#include "checkpoint/extensions.h"

#include <QFileDialog>
#include <QInputDialog>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>

#include <optional>

namespace ckpt::ui::dialogs {
namespace {

std::optional<QStringList>& nextOpen()
{
    static std::optional<QStringList> v;
    return v;
}
std::optional<QString>& nextFolder()
{
    static std::optional<QString> v;
    return v;
}
QString& openFilter()
{
    static QString v;
    return v;
}
QString& openFolderAsked()
{
    static QString v;
    return v;
}
std::optional<QString>& nextUrl()
{
    static std::optional<QString> v;
    return v;
}

std::optional<QString>& nextSave()
{
    static std::optional<QString> v;
    return v;
}
std::optional<bool>& nextConfirm()
{
    static std::optional<bool> v;
    return v;
}
QString& confirmText()
{
    static QString v;
    return v;
}
struct Choice {
    std::optional<int> next;
    QString text;
    QStringList answers;
};
Choice& choice()
{
    static Choice v;
    return v;
}
struct ErrorLog {
    bool record = false;
    QStringList messages;
};
ErrorLog& errorLog()
{
    static ErrorLog log;
    return log;
}

// "*.pt" for ".pt": QDir's wildcard also matches a name that is the extension alone (".metadata").
template <std::size_t N> QStringList patternsOf(const std::array<std::string_view, N>& extensions)
{
    QStringList patterns;
    for (const auto ext : extensions) {
        patterns << QStringLiteral("*") + QString::fromLatin1(ext.data(), static_cast<qsizetype>(ext.size()));
    }
    return patterns;
}

}  // namespace

const QStringList& checkpointPatterns()
{
    static const QStringList kPatterns = patternsOf(kCheckpointFileExtensions);
    return kPatterns;
}

const QStringList& openablePatterns()
{
    static const QStringList kPatterns = checkpointPatterns() + patternsOf(kSetFileExtensions);
    return kPatterns;
}

QString checkpointFilter()
{
    return QStringLiteral("Checkpoints (%1);;All files (*)").arg(openablePatterns().join(QLatin1Char(' ')));
}

QStringList openFileNames(QWidget* parent, const QString& title, const QString& filter, const QString& folder)
{
    openFilter() = filter;
    openFolderAsked() = folder;
    if (auto& n = nextOpen()) {
        auto answer = *n;
        n.reset();
        return answer;
    }
    // Qt's own dialog, not the platform's: only it can be told to list dot files.
    QFileDialog dialog(parent, title, folder, filter);
    dialog.setFileMode(QFileDialog::ExistingFiles);
    dialog.setOption(QFileDialog::DontUseNativeDialog);
    dialog.setFilter(dialog.filter() | QDir::Hidden);
    return dialog.exec() == QDialog::Accepted ? dialog.selectedFiles() : QStringList();
}

QString openFolder(QWidget* parent, const QString& title, const QString& folder)
{
    openFolderAsked() = folder;
    if (auto& n = nextFolder()) {
        auto answer = *n;
        n.reset();
        return answer;
    }
    return QFileDialog::getExistingDirectory(parent, title, folder);
}

QString saveFileName(QWidget* parent, const QString& title, const QString& suggested, const QString& filter)
{
    if (auto& n = nextSave()) {
        auto answer = *n;
        n.reset();
        return answer;
    }
    return QFileDialog::getSaveFileName(parent, title, suggested, filter);
}

QString openUrl(QWidget* parent, const QString& suggested)
{
    if (auto& n = nextUrl()) {
        auto answer = *n;
        n.reset();
        return answer;
    }
    bool ok = false;
    const QString url = QInputDialog::getText(
        parent, QObject::tr("Open URL"),
        QObject::tr("An http(s) URL, a Hugging Face location: hf://ORG/REPO/FILE, or hf://ORG/REPO for its "
                    "weights, or an object store's s3://BUCKET/KEY or s3://BUCKET/PREFIX/ (signed with your AWS "
                    "credentials).\nOnly the bytes that describe the checkpoint are downloaded."),
        QLineEdit::Normal, suggested, &ok);
    return ok ? url.trimmed() : QString();
}

void error(QWidget* parent, const QString& title, const QString& text)
{
    if (errorLog().record) {
        errorLog().messages << text;
        return;
    }
    QMessageBox::critical(parent, title, text);
}

bool confirm(QWidget* parent, const QString& title, const QString& text)
{
    confirmText() = text;
    if (auto& n = nextConfirm()) {
        const bool answer = *n;
        n.reset();
        return answer;
    }
    return QMessageBox::question(parent, title, text, QMessageBox::Yes | QMessageBox::No, QMessageBox::No) ==
           QMessageBox::Yes;
}

int choose(QWidget* parent, const QString& title, const QString& text, const QStringList& answers)
{
    auto& c = choice();
    c.text = text;
    c.answers = answers;
    if (c.next) {
        const int answer = *c.next;
        c.next.reset();
        return answer;
    }
    QMessageBox box(QMessageBox::Warning, title, text, QMessageBox::NoButton, parent);
    QList<QAbstractButton*> buttons;
    for (const auto& answer : answers) {
        buttons << box.addButton(answer, QMessageBox::AcceptRole);
    }
    box.addButton(QMessageBox::Cancel);
    if (!buttons.isEmpty()) {
        box.setDefaultButton(qobject_cast<QPushButton*>(buttons.front()));
    }
    box.exec();
    return static_cast<int>(buttons.indexOf(box.clickedButton()));
}

void setNextChoice(std::optional<int> answer)
{
    choice().next = answer;
}
QString lastChoiceText()
{
    return choice().text;
}
QStringList lastChoiceAnswers()
{
    return choice().answers;
}

void setNextConfirm(bool answer)
{
    nextConfirm() = answer;
}
QString lastConfirmText()
{
    return confirmText();
}

void setNextOpenFileNames(const QStringList& names)
{
    nextOpen() = names;
}
void setNextOpenFolder(const QString& folder)
{
    nextFolder() = folder;
}
QString lastOpenFilter()
{
    return openFilter();
}
QString lastOpenFolder()
{
    return openFolderAsked();
}
void setNextSaveFileName(const QString& name)
{
    nextSave() = name;
}
void setNextOpenUrl(const QString& url)
{
    nextUrl() = url;
}
void setRecordErrors(bool on)
{
    errorLog().record = on;
    errorLog().messages.clear();
}
QStringList recordedErrors()
{
    return errorLog().messages;
}

}  // namespace ckpt::ui::dialogs
