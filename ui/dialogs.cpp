#include "dialogs.h"

#include <QFileDialog>
#include <QMessageBox>

#include <optional>

namespace ckpt::ui::dialogs {
namespace {

std::optional<QStringList>& nextOpen()
{
    static std::optional<QStringList> v;
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
struct ErrorLog {
    bool record = false;
    QStringList messages;
};
ErrorLog& errorLog()
{
    static ErrorLog log;
    return log;
}

}  // namespace

const QStringList& checkpointPatterns()
{
    static const QStringList kPatterns{
        QStringLiteral("*.pt"),          QStringLiteral("*.pth"), QStringLiteral("*.ckpt"), QStringLiteral("*.bin"),
        QStringLiteral("*.safetensors"), QStringLiteral("*.tar"), QStringLiteral("*.pkl"),  QStringLiteral("*.pt2")};
    return kPatterns;
}

QString checkpointFilter()
{
    return QStringLiteral("Checkpoints (%1);;All files (*)").arg(checkpointPatterns().join(QLatin1Char(' ')));
}

QStringList openFileNames(QWidget* parent, const QString& title, const QString& filter)
{
    if (auto& n = nextOpen()) {
        auto answer = *n;
        n.reset();
        return answer;
    }
    return QFileDialog::getOpenFileNames(parent, title, QString(), filter);
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
void setNextSaveFileName(const QString& name)
{
    nextSave() = name;
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
