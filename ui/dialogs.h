// The seam between the window and modal dialogs: every file and message dialog goes through here,
// so a test answers them in advance (setNext...) instead of driving a native dialog.
#pragma once

#include <QString>
#include <QStringList>

#include <optional>

class QWidget;

namespace ckpt::ui::dialogs {

// The names of files that open as one checkpoint (core's kCheckpointFileExtensions): the files a
// dropped folder offers and the files of a set a tab can show alone.
const QStringList& checkpointPatterns();
// Those and the files that open their set (`.metadata`, `*.distcp`, an index): what Open and
// Compare list, so a torch.distributed.checkpoint folder does not look empty.
const QStringList& openablePatterns();
QString checkpointFilter();  // "Checkpoints (*.pt ...);;All files (*)", from openablePatterns()

// Shows hidden files too: a DCP folder's `.metadata` is one. `folder`: where the dialog starts (the
// current file's folder), empty for Qt's choice.
QStringList openFileNames(QWidget* parent, const QString& title, const QString& filter,
                          const QString& folder = QString());
// One folder (a sharded set, a DCP or ZeRO checkpoint, a Trainer checkpoint-N/); empty when cancelled.
QString openFolder(QWidget* parent, const QString& title, const QString& folder = QString());
QString saveFileName(QWidget* parent, const QString& title, const QString& suggested, const QString& filter);
void error(QWidget* parent, const QString& title, const QString& text);
// File > Open URL: an http(s) URL or hf:// location, `suggested` filled in (a URL on the clipboard);
// empty when cancelled.
QString openUrl(QWidget* parent, const QString& suggested);
// A yes/no question (Yes is not the default: the questions asked are about destroying something).
bool confirm(QWidget* parent, const QString& title, const QString& text);
// A question with its own answers, the first the default; the index of the one chosen, -1 when the
// dialog is closed (Esc) without one.
int choose(QWidget* parent, const QString& title, const QString& text, const QStringList& answers);

// Test hooks: the next call of the matching function returns this answer without showing anything.
void setNextOpenFileNames(const QStringList& names);
void setNextOpenFolder(const QString& folder);
// The filter and the folder the last openFileNames() or openFolder() was given (also when a hook
// answered it).
QString lastOpenFilter();
QString lastOpenFolder();
void setNextSaveFileName(const QString& name);
void setNextOpenUrl(const QString& url);
// The next confirm() answers this; the question it was asked is kept for the test to read.
void setNextConfirm(bool answer);
QString lastConfirmText();
// The next choose() answers this index (nullopt: asks again); the question and its answers are
// kept for the test to read.
void setNextChoice(std::optional<int> answer);
QString lastChoiceText();
QStringList lastChoiceAnswers();
// Errors shown while a hook is armed are recorded here instead of shown (cleared by the caller).
void setRecordErrors(bool on);
QStringList recordedErrors();

}  // namespace ckpt::ui::dialogs
