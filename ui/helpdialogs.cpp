#include "helpdialogs.h"

#include "screenfit.h"

#include <QAction>
#include <QApplication>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFile>
#include <QKeySequence>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QTextBrowser>
#include <QVBoxLayout>

// The README is compiled into the static library (guide.qrc), which registers it only when asked:
// Q_INIT_RESOURCE must be called outside any namespace.
static void initGuideResource()
{
    Q_INIT_RESOURCE(guide);
}

namespace ckpt::ui::help {
namespace {

// A page of text in a window of its own: links open in the browser.
QDialog* showPage(QWidget* parent, const char* name, const QString& title, const QString& text, bool markdown,
                  const QSize& size)
{
    auto* dialog = new QDialog(parent);
    dialog->setObjectName(QLatin1String(name));
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->setWindowTitle(title);
    auto* browser = new QTextBrowser(dialog);
    browser->setObjectName(QStringLiteral("helpText"));
    browser->setOpenExternalLinks(true);
    if (markdown) {
        browser->setMarkdown(text);
    } else {
        browser->setHtml(text);
    }
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
    QObject::connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::close);
    auto* layout = new QVBoxLayout(dialog);
    layout->addWidget(browser, 1);
    layout->addWidget(buttons);
    dialog->resize(size);
    placeOver(dialog, parent);
    dialog->show();
    return dialog;
}

// "&Open…" -> "Open".
QString plainText(const QAction* action)
{
    QString text = action->text();
    text.remove(QLatin1Char('&'));
    if (text.endsWith(QStringLiteral("…"))) {
        text.chop(1);
    }
    return text;
}

void collect(const QMenu* menu, const QString& path, QList<QPair<QString, QString>>& rows)
{
    for (const auto* action : menu->actions()) {
        if (action->menu() != nullptr) {
            collect(action->menu(), path + plainText(action) + QStringLiteral(" > "), rows);
            continue;
        }
        QStringList keys;
        for (const auto& key : action->shortcuts()) {
            keys << key.toString(QKeySequence::NativeText);
        }
        if (!keys.isEmpty()) {
            rows.append({path + plainText(action), keys.join(QStringLiteral(" or "))});
        }
    }
}

}  // namespace

QString guideMarkdown()
{
    static const bool registered = (initGuideResource(), true);
    (void)registered;
    QFile readme(QStringLiteral(":/guide/README.md"));
    if (!readme.open(QIODevice::ReadOnly)) {
        return {};
    }
    const QString text = QString::fromUtf8(readme.readAll());
    const qsizetype start = text.indexOf(QStringLiteral("\n## A tour"));
    if (start < 0) {
        return {};
    }
    const qsizetype end = text.indexOf(QStringLiteral("\n## "), start + 1);
    QStringList kept;
    for (const auto& line : text.mid(start + 1, end < 0 ? -1 : end - start - 1).split(QLatin1Char('\n'))) {
        if (!line.startsWith(QStringLiteral("!["))) {  // the README's pictures are not installed
            kept << line;
        }
    }
    kept.front() = QObject::tr("# ckptscope: a tour");
    return kept.join(QLatin1Char('\n'));
}

QList<QPair<QString, QString>> shortcuts(const QMenuBar* menus)
{
    QList<QPair<QString, QString>> rows;
    for (const auto* action : menus->actions()) {
        if (action->menu() != nullptr) {
            collect(action->menu(), plainText(action) + QStringLiteral(" > "), rows);
        }
    }
    // Shortcuts of panels, which no menu holds.
    rows.append(
        {QObject::tr("In the filter: clear it"), QKeySequence(Qt::Key_Escape).toString(QKeySequence::NativeText)});
    return rows;
}

QDialog* showGuide(QWidget* parent)
{
    return showPage(parent, "guideDialog", QObject::tr("ckptscope Guide"), guideMarkdown(), true, {760, 640});
}

QDialog* showShortcuts(QWidget* parent, const QMenuBar* menus)
{
    QString html = QStringLiteral("<table cellspacing='0' cellpadding='4'>");
    for (const auto& [what, keys] : shortcuts(menus)) {
        html +=
            QStringLiteral("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(keys.toHtmlEscaped(), what.toHtmlEscaped());
    }
    html += QStringLiteral("</table>");
    return showPage(parent, "shortcutsDialog", QObject::tr("Keyboard Shortcuts"), html, false, {520, 560});
}

QDialog* showDocumentation(QWidget* parent)
{
    const QString home = QStringLiteral(CKPTSCOPE_HOMEPAGE);
    const QString html =
        QObject::tr("<p><b>In this window</b>: Help &gt; Guide (F1) tours the window; every finding's text says what "
                    "goes wrong and its fix; tooltips say what each control does.</p>"
                    "<p><b>On the command line</b>: <code>ckptscope --help</code> lists the commands, and "
                    "<code>ckptscope COMMAND --help</code> (inspect, check, convert, diff, testload) every option "
                    "of one, with examples. <code>man ckptscope</code> is the manual page the package "
                    "installs.</p>"
                    "<p><b>On the project page</b>, <a href='%1'>%1</a>: the README (this guide, every finding "
                    "code in a table, the command line, how it is built and tested) and the format notes.</p>")
            .arg(home.toHtmlEscaped());
    return showPage(parent, "documentationDialog", QObject::tr("Where the Documentation Is"), html, false, {560, 320});
}

void showAbout(QWidget* parent)
{
    QMessageBox::about(parent, QObject::tr("About ckptscope"),
                       QObject::tr("<b>ckptscope %1</b><p>Inspect, diagnose, test-load and fix PyTorch checkpoints "
                                   "without running their pickled code.</p><p><a href='%2'>%2</a></p>")
                           .arg(QApplication::applicationVersion(), QStringLiteral(CKPTSCOPE_HOMEPAGE)));
}

}  // namespace ckpt::ui::help
