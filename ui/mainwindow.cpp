#include "mainwindow.h"

#include "checkpoint/model_folder.h"
#include "compareview.h"
#include "dialogs.h"
#include "documentview.h"
#include "drops.h"
#include "exportpanel.h"
#include "helpdialogs.h"
#include "icons.h"
#include "jobtracker.h"
#include "remote/http_client.h"
#include "setmembership.h"
#include "sharded/listing.h"
#include "testloadpanel.h"
#include "text.h"

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTabWidget>
#include <QToolButton>
#include <QUrl>
#include <QUrlQuery>
#include <QVBoxLayout>

namespace ckpt::ui {
namespace {

constexpr int kMaxRecent = 10;
// The tab property that holds the order a tab was asked for in (MainWindow::tabIndexFor).
constexpr const char* kOpenOrder = "ckptscopeOpenOrder";
constexpr int kMaxTabTitle = 32;  // characters; the tooltip has the full path
// A banner link to a file with this query opens the file alone, not its set.
const QString kAloneQuery = QStringLiteral("alone");
// A banner link ckptscope:download?url=URL downloads URL whole (a server without range requests).
const QString kLinkScheme = QStringLiteral("ckptscope");
const QString kDownloadPath = QStringLiteral("download");
// The tab properties that say what a tab was opened from (MainWindow::tabOf).
constexpr const char* kOpenedFrom = "ckptscopeOpenedFrom";
constexpr const char* kOpenedAlone = "ckptscopeOpenedAlone";
constexpr const char* kFullTitle = "ckptscopeTitle";  // the tab's title before tabTitle() cuts it
// Where File > Open started last (QSettings), for a window with no tab.
const QString kLastFolderKey = QStringLiteral("dialogs/lastFolder");

// A new first size takes at most this share of the available screen: the rest is the frame's.
QSize roomFor(const QSize& available)
{
    return {available.width() * 95 / 100, available.height() * 92 / 100};
}

QWidget* makeEmptyPage(QWidget* parent, QAction* open, QAction* openFolder)
{
    auto* page = new QWidget(parent);
    page->setObjectName(QStringLiteral("emptyPage"));
    auto* icon = new QLabel(page);
    icon->setPixmap(icons::app().pixmap(64, 64));
    icon->setAlignment(Qt::AlignCenter);
    auto* hint = new QLabel(MainWindow::kDropHint, page);
    hint->setObjectName(QStringLiteral("dropHint"));
    hint->setAlignment(Qt::AlignCenter);
    QFont f = hint->font();
    f.setPointSizeF(f.pointSizeF() * 1.4);
    hint->setFont(f);
    auto* sub = new QLabel(QObject::tr("ckptscope reads it without running any of its code, shows what is inside,\n"
                                       "says what will go wrong when it is loaded, and writes a fixed copy."),
                           page);
    sub->setAlignment(Qt::AlignCenter);
    sub->setStyleSheet(QStringLiteral("color: gray"));
    auto* button = new QPushButton(QObject::tr("Open a file…"), page);
    button->setObjectName(QStringLiteral("emptyOpenButton"));
    QObject::connect(button, &QPushButton::clicked, open, &QAction::trigger);
    // Sets (sharded, DCP, ZeRO) are folders: the second way in is as visible as the first.
    auto* folderButton = new QPushButton(QObject::tr("Open a folder…"), page);
    folderButton->setObjectName(QStringLiteral("emptyOpenFolderButton"));
    QObject::connect(folderButton, &QPushButton::clicked, openFolder, &QAction::trigger);
    auto* buttons = new QHBoxLayout;
    buttons->addStretch(1);
    buttons->addWidget(button);
    buttons->addWidget(folderButton);
    buttons->addStretch(1);
    auto* layout = new QVBoxLayout(page);
    layout->addStretch(1);
    layout->addWidget(icon);
    layout->addWidget(hint);
    layout->addWidget(sub);
    layout->addSpacing(12);
    layout->addLayout(buttons);
    layout->addStretch(1);
    return page;
}

}  // namespace

QSize MainWindow::initialSize(const QSize& available)
{
    // The preferred size, or what the screen has room for with a margin for the window frame.
    return kPreferredSize.boundedTo(roomFor(available));
}

QRect MainWindow::fittedGeometry(const QRect& saved, const QRect& available)
{
    QRect g(saved.topLeft(), saved.size().boundedTo(roomFor(available.size())));
    if (!available.contains(g)) {
        g.moveCenter(available.center());  // the margin left by roomFor is the frame's, above and below
    }
    return g;
}

QString MainWindow::recentTitle(const QString& path)
{
    // Every rank file is model_states.pt and every Trainer folder checkpoint-N: the folder it is
    // in tells them apart.
    if (isRemoteInput(path)) {
        const QUrl url(path);
        const QString name = url.fileName();
        return name.isEmpty() ? path
                              : QStringLiteral("%1 — %2").arg(name, url.adjusted(QUrl::RemoveFilename).toString());
    }
    const QFileInfo info(path);
    return QStringLiteral("%1 — %2").arg(info.fileName(), QDir::toNativeSeparators(info.absolutePath()));
}

QString MainWindow::tabTitle(const QString& fileName)
{
    if (fileName.size() <= kMaxTabTitle) {
        return fileName;
    }
    const int keep = (kMaxTabTitle - 1) / 2;
    return fileName.left(keep) + QStringLiteral("…") + fileName.right(kMaxTabTitle - 1 - keep);
}

QStringList MainWindow::checkpointFilesIn(const QString& folder)
{
    QStringList found;
    const QDir top(folder);
    const auto scan = [&](const QDir& dir) {
        for (const auto& f :
             dir.entryInfoList(dialogs::checkpointPatterns(), QDir::Files | QDir::Readable, QDir::Name)) {
            found << f.absoluteFilePath();
        }
    };
    scan(top);
    for (const auto& sub : top.entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot | QDir::Readable, QDir::Name)) {
        scan(QDir(sub.absoluteFilePath()));
    }
    found.sort();
    return found;
}

const QString MainWindow::kDropHint = QObject::tr("Drop a .pt/.pth/.ckpt/.bin/.safetensors file or a folder here");

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_stack(new QStackedWidget(this)), m_tabs(new QTabWidget(this)), m_banner(new QWidget(this)),
      m_bannerText(new QLabel(m_banner)), m_bannerIcon(new QLabel(m_banner)), m_formatLabel(new QLabel(this)),
      m_tensorsLabel(new QLabel(this)), m_devicesLabel(new QLabel(this)),
      m_cancelOpen(new QPushButton(tr("Cancel"), this)), m_openProgress(new QProgressBar(this))
{
    setObjectName(QStringLiteral("mainWindow"));
    setWindowTitle(QStringLiteral("ckptscope"));
    setWindowIcon(icons::app());
    setAcceptDrops(true);

    buildMenus();

    m_tabs->setObjectName(QStringLiteral("documentTabs"));
    m_tabs->setTabsClosable(true);
    m_tabs->setMovable(true);
    m_tabs->setDocumentMode(true);
    connect(m_tabs, &QTabWidget::tabCloseRequested, this, &MainWindow::closeTab);
    connect(m_tabs, &QTabWidget::currentChanged, this, &MainWindow::updateChrome);

    m_stack->setObjectName(QStringLiteral("stack"));
    m_stack->addWidget(makeEmptyPage(m_stack, findChild<QAction*>(QStringLiteral("openAction")),
                                     findChild<QAction*>(QStringLiteral("openFolderAction"))));
    m_stack->addWidget(m_tabs);

    // The error banner: the same one-line message the command line prints, and the app stays usable.
    m_banner->setObjectName(QStringLiteral("errorBanner"));
    m_banner->setAutoFillBackground(true);
    m_bannerText->setObjectName(QStringLiteral("errorText"));
    m_bannerText->setWordWrap(true);
    m_bannerText->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::LinksAccessibleByMouse);
    connect(m_bannerText, &QLabel::linkActivated, this, [this](const QString& link) {
        const QUrl url(link);
        if (url.scheme() == kLinkScheme && url.path() == kDownloadPath) {
            startBatch();
            openRemoteDocument(QUrlQuery(url).queryItemValue(QStringLiteral("url"), QUrl::FullyDecoded), true);
            return;
        }
        const QString file = url.adjusted(QUrl::RemoveQuery).toLocalFile();
        if (url.query() == kAloneQuery) {
            openFileAlone(file);
        } else {
            openFiles({file});
        }
    });
    auto* closeBanner = new QToolButton(m_banner);
    closeBanner->setObjectName(QStringLiteral("errorClose"));
    closeBanner->setText(QStringLiteral("✕"));
    closeBanner->setToolTip(tr("Close this message"));
    closeBanner->setAutoRaise(true);
    connect(closeBanner, &QToolButton::clicked, this, [this] {
        m_bannerLines.clear();
        m_banner->hide();
    });
    auto* bannerLayout = new QHBoxLayout(m_banner);
    bannerLayout->setContentsMargins(8, 4, 4, 4);
    bannerLayout->addWidget(m_bannerIcon);
    setBannerKind(true);
    bannerLayout->addWidget(m_bannerText, 1);
    bannerLayout->addWidget(closeBanner);
    m_banner->hide();

    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);
    layout->addWidget(m_banner);
    layout->addWidget(m_stack, 1);
    setCentralWidget(central);

    m_formatLabel->setObjectName(QStringLiteral("formatLabel"));
    m_tensorsLabel->setObjectName(QStringLiteral("tensorsLabel"));
    m_devicesLabel->setObjectName(QStringLiteral("devicesLabel"));
    for (auto* label : {m_formatLabel, m_tensorsLabel, m_devicesLabel}) {
        label->setContentsMargins(10, 0, 10, 0);
    }
    // Stops every open in progress (a large set, a slow server); shown only while one runs.
    m_cancelOpen->setObjectName(QStringLiteral("cancelOpenButton"));
    m_cancelOpen->setToolTip(tr("Stop opening: a transfer in progress ends at once, a set after the file it reads"));
    m_cancelOpen->hide();
    connect(m_cancelOpen, &QPushButton::clicked, this, &MainWindow::cancelOpening);
    // How far an open that has run a second is: the files of a set read, or (a transfer, whose
    // end is not known) busy, with the bytes read in the message beside it.
    m_openProgress->setObjectName(QStringLiteral("openProgress"));
    m_openProgress->setMaximumWidth(fontMetrics().horizontalAdvance(QLatin1Char('x')) * 24);
    m_openProgress->setTextVisible(false);
    m_openProgress->hide();
    statusBar()->addPermanentWidget(m_openProgress);
    statusBar()->addPermanentWidget(m_cancelOpen);
    statusBar()->addPermanentWidget(m_formatLabel);
    statusBar()->addPermanentWidget(m_tensorsLabel);
    statusBar()->addPermanentWidget(m_devicesLabel);

    QSettings settings;
    const QScreen* here = screen();
    if (!restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray())) {
        resize(here != nullptr ? initialSize(here->availableGeometry().size()) : kPreferredSize);
    } else if (here != nullptr && !isMaximized() && !isFullScreen()) {
        // Qt restores the size saved on another screen as it was.
        setGeometry(fittedGeometry(geometry(), here->availableGeometry()));
    }
    restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
    rebuildRecentMenu();
    updateChrome();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus()
{
    auto* file = menuBar()->addMenu(tr("&File"));
    auto* open = file->addAction(tr("&Open…"), this, [this] {
        const auto names =
            dialogs::openFileNames(this, tr("Open checkpoints"), dialogs::checkpointFilter(), dialogFolder());
        if (!names.isEmpty()) {
            QSettings().setValue(kLastFolderKey, QFileInfo(names.front()).absolutePath());
        }
        openFiles(names);
    });
    open->setObjectName(QStringLiteral("openAction"));
    // The keys are spelled out: a desktop's standard keys differ (QKeySequence::Close is Ctrl+W on one,
    // Ctrl+F4 and Ctrl+W on another, QKeySequence::Quit nothing on a third), and the README and Help
    // list these.
    open->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_O));
    // Sets (a sharded folder, DCP, ZeRO) are folders, which a file dialog cannot pick.
    auto* openFolder = file->addAction(tr("Open &Folder…"), this, [this] {
        const QString folder = dialogs::openFolder(this, tr("Open a checkpoint folder"), dialogFolder());
        if (!folder.isEmpty()) {
            QSettings().setValue(kLastFolderKey, QFileInfo(folder).absolutePath());
            openFiles({folder});
        }
    });
    openFolder->setObjectName(QStringLiteral("openFolderAction"));
    openFolder->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
    // A checkpoint on a web server or the Hugging Face Hub, read with range requests.
    auto* openUrl = file->addAction(tr("Open &URL…"), this, [this] {
        const QString clip = QApplication::clipboard()->text().trimmed();
        const QString url = dialogs::openUrl(this, isRemoteInput(clip) ? clip : QString());
        if (!url.isEmpty()) {
            openFiles({url});
        }
    });
    openUrl->setObjectName(QStringLiteral("openUrlAction"));
    openUrl->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_U));
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    m_recentMenu->setObjectName(QStringLiteral("recentMenu"));
    m_fileAloneAction = file->addAction(tr("Open This File &Alone"), this, [this] {
        if (auto* v = currentView(); v && !v->openedFile().isEmpty()) {
            openFileAlone(v->openedFile());
        }
    });
    m_fileAloneAction->setObjectName(QStringLiteral("openFileAloneAction"));
    m_wholeSetAction = file->addAction(tr("Open the &Whole Set"), this, [this] {
        if (auto* v = currentView(); v && v->offersWholeSet()) {
            Q_EMIT v->openWholeSetRequested();
        }
    });
    m_wholeSetAction->setObjectName(QStringLiteral("openWholeSetAction"));
    auto* compare = file->addAction(tr("Co&mpare With…"), this, [this] {
        if (auto* v = currentView()) {
            openCompareWindow(this, v->document()->checkpoint);
        }
    });
    compare->setObjectName(QStringLiteral("compareAction"));
    m_fileTabActions << compare;
    auto* close = file->addAction(tr("&Close Tab"), this, [this] { closeTab(m_tabs->currentIndex()); });
    close->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_W));
    file->addSeparator();
    auto* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Q));

    auto* view = menuBar()->addMenu(tr("&View"));
    auto* filter = view->addAction(tr("&Filter Keys"), this, [this] {
        if (auto* v = currentView()) {
            v->focusFilter();
        }
    });
    filter->setObjectName(QStringLiteral("filterAction"));
    filter->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_F));
    view->addSeparator();
    // Window shortcuts: a tree or a field with the focus would otherwise take Ctrl+PgDown itself.
    auto* next = view->addAction(tr("&Next Tab"), this, [this] { switchTab(1); });
    next->setObjectName(QStringLiteral("nextTabAction"));
    next->setShortcuts({QKeySequence(Qt::CTRL | Qt::Key_PageDown), QKeySequence(Qt::CTRL | Qt::Key_Tab)});
    auto* previous = view->addAction(tr("&Previous Tab"), this, [this] { switchTab(-1); });
    previous->setObjectName(QStringLiteral("previousTabAction"));
    previous->setShortcuts({QKeySequence(Qt::CTRL | Qt::Key_PageUp), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Tab)});
    view->addSeparator();
    auto* findingsAction = view->addAction(tr("F&indings"), this, [this] {
        if (auto* v = currentView()) {
            v->showFindings();
        }
    });
    findingsAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_1));
    m_fileTabActions << findingsAction;
    auto* testLoadAction = view->addAction(tr("&Test Load"), this, [this] {
        if (auto* v = currentView()) {
            v->showTestLoad();
        }
    });
    testLoadAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_2));
    m_fileTabActions << testLoadAction;
    auto* exportAction = view->addAction(tr("&Export"), this, [this] {
        if (auto* v = currentView()) {
            v->showExport();
        }
    });
    exportAction->setShortcuts({QKeySequence(Qt::CTRL | Qt::Key_3), QKeySequence(Qt::CTRL | Qt::Key_E)});
    m_fileTabActions << exportAction;
    m_filesAction = view->addAction(tr("&Files"), this, [this] {
        if (auto* v = currentView()) {
            v->showFiles();
        }
    });
    m_filesAction->setObjectName(QStringLiteral("setFilesAction"));
    m_filesAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_4));

    auto* run = menuBar()->addMenu(tr("&Run"));
    auto* load = run->addAction(tr("Test &Load on the Chosen Device"), this, [this] {
        if (auto* v = currentView()) {
            v->showTestLoad();
            v->testLoad()->requestLoad();
        }
    });
    load->setObjectName(QStringLiteral("testLoadAction"));
    load->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_L));
    m_fileTabActions << load;
    auto* replay = run->addAction(tr("&Simulate DDP Ranks"), this, [this] {
        if (auto* v = currentView()) {
            v->showTestLoad();
            v->testLoad()->requestReplay();
        }
    });
    replay->setObjectName(QStringLiteral("ddpReplayAction"));
    replay->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_L));
    replay->setToolTip(tr("Start N ranks that each load the checkpoint as torch.load would (needs an NVIDIA GPU)"));
    auto* write = run->addAction(tr("&Export the Fixed Copy"), this, [this] {
        if (auto* v = currentView()) {
            v->showExport();
            v->exportPanel()->requestExport();
        }
    });
    write->setObjectName(QStringLiteral("exportNowAction"));
    write->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E));
    m_fileTabActions << write;

    buildHelpMenu();
}

void MainWindow::buildHelpMenu()
{
    auto* help = menuBar()->addMenu(tr("&Help"));
    auto* guide = help->addAction(tr("&Guide"), this, [this] { help::showGuide(this); });
    guide->setObjectName(QStringLiteral("guideAction"));
    guide->setShortcut(QKeySequence(Qt::Key_F1));
    help->addAction(tr("&Keyboard Shortcuts"), this, [this] { help::showShortcuts(this, menuBar()); })
        ->setObjectName(QStringLiteral("shortcutsAction"));
    help->addAction(tr("Where the &Documentation Is"), this, [this] { help::showDocumentation(this); })
        ->setObjectName(QStringLiteral("documentationAction"));
    help->addSeparator();
    help->addAction(tr("&About ckptscope"), this, [this] { help::showAbout(this); });
}

void MainWindow::startBatch()
{
    m_bannerLines.clear();
    m_banner->hide();
}

int MainWindow::tabOf(const QString& input, bool alone) const
{
    for (int i = 0; i < m_tabs->count(); ++i) {
        const auto* tab = m_tabs->widget(i);
        if (tab->property(kOpenedFrom).toString() == input && tab->property(kOpenedAlone).toBool() == alone) {
            return i;
        }
    }
    return -1;
}

bool MainWindow::alreadyOpen(const QString& input, bool alone)
{
    if (const int tab = tabOf(input, alone); tab >= 0) {
        m_tabs->setCurrentIndex(tab);
        return true;
    }
    // Dropped twice before the first read ended: that read's tab is the one.
    return m_opening.contains(alone ? QStringLiteral("alone:") + input : input);
}

void MainWindow::openFiles(const QStringList& paths)
{
    std::erase_if(m_openJobs, [](const auto& j) { return !j->isRunning(); });
    startBatch();
    for (const auto& path : paths) {
        if (path.isEmpty()) {
            continue;
        }
        if (isRemoteInput(path)) {
            if (!alreadyOpen(path, false)) {
                openRemoteDocument(path);
            }
            continue;
        }
        const QString absolute = QDir::cleanPath(QFileInfo(path).absoluteFilePath());
        // The same file twice is one tab: the second open shows the first.
        if (alreadyOpen(absolute, false)) {
            continue;
        }
        if (openAsSet(absolute)) {
            continue;
        }
        // A folder holding one model beside a run's state opens that model (model_folder.h), the
        // model-folder finding saying what the rest is; any other folder lists its checkpoints.
        const bool isDir = QFileInfo(absolute).isDir();
        const auto folder = isDir ? readModelFolder(ss(absolute)) : std::nullopt;
        if (isDir && (!folder || folder->model().empty()) && offerFolder(absolute)) {
            continue;
        }
        openDocument(absolute);
    }
}

void MainWindow::startOpen(const QString& shown, const QString& input, OpenLoad load,
                           std::function<void(const DocumentPtr&, int)> opened,
                           std::function<void(const QString&)> failed)
{
    const int order = m_nextOpenOrder++;
    if (!isOpening()) {
        m_openingFor.start();
    }
    statusBar()->showMessage(tr("Opening %1…").arg(shown));
    const QString opening = m_opening.emplace_back(input);
    auto tracker = std::make_unique<JobTracker>(this);
    tracker->setProgressHandler(
        [this, shown](double fraction, const QString& text) { showOpenProgress(shown, fraction, text); });
    tracker->start(
        [load = std::move(load)](std::stop_token stop, const ProgressFn& progress) {
            return load(stop, [&progress](double fraction, const std::string& text) {
                progress(fraction, QString::fromStdString(text));
            });
        },
        [this, order, opening, opened = std::move(opened), failed = std::move(failed)](Expected<DocumentPtr> doc) {
            m_opening.removeOne(opening);
            statusBar()->clearMessage();
            showOpening();
            if (doc) {
                opened(*doc, order);
            } else if (doc.error().code == ErrorCode::Cancelled) {
                statusBar()->showMessage(tr("Opening cancelled"), 4000);  // asked for: no banner
            } else {
                failed(qs(doc.error().describe()));
            }
        });
    m_openJobs.push_back(std::move(tracker));
    showOpening();
}

void MainWindow::showOpening()
{
    m_cancelOpen->setVisible(isOpening());
    if (!isOpening()) {
        m_openProgress->hide();
    }
}

void MainWindow::showOpenProgress(const QString& shown, double fraction, const QString& text)
{
    constexpr qint64 kQuietMs = 1000;  // a quick open shows no bar
    if (!isOpening() || m_openingFor.elapsed() < kQuietMs) {
        return;
    }
    if (fraction < 0) {
        m_openProgress->setRange(0, 0);  // busy
    } else {
        constexpr int kSteps = 1000;
        m_openProgress->setRange(0, kSteps);
        m_openProgress->setValue(static_cast<int>(fraction * kSteps));
    }
    m_openProgress->show();
    statusBar()->showMessage(tr("Opening %1: %2").arg(QFileInfo(shown).fileName(), text));
}

void MainWindow::cancelOpening()
{
    for (auto& job : m_openJobs) {
        job->requestStop();
    }
}

void MainWindow::openDocument(const QString& absolute, bool alone)
{
    startOpen(
        absolute, alone ? QStringLiteral("alone:") + absolute : absolute,
        [file = absolute.toStdString()](std::stop_token stop, const OpenProgress&) { return loadDocument(file, stop); },
        [this, absolute, alone](const DocumentPtr& doc, int order) {
            addDocument(doc, order, absolute, alone);
            rememberRecent(absolute, alone);
            Q_EMIT documentOpened(absolute);
        },
        [this, absolute](const QString& message) {
            showError(message);
            Q_EMIT openFailed(absolute, message);
        });
}

void MainWindow::openRemoteDocument(const QString& url, bool whole)
{
    startOpen(
        url, url,
        [input = url.toStdString(), whole](std::stop_token stop, const OpenProgress& progress) {
            return loadRemoteDocument(input, stop, progress, whole);
        },
        [this, url](const DocumentPtr& doc, int order) {
            addDocument(doc, order, url);
            // A URL with a query (a pre-signed object-store link) carries its signature: not kept.
            if (!QUrl(url).hasQuery()) {
                rememberRecent(url);
            }
            Q_EMIT documentOpened(url);
        },
        [this, url, whole](const QString& message) {
            if (!whole && message.contains(QLatin1String(remote::kNoRangesMessage.data(),
                                                         static_cast<qsizetype>(remote::kNoRangesMessage.size())))) {
                offerWholeDownload(url, message);
            } else {
                showError(message);
            }
            Q_EMIT openFailed(url, message);
        });
}

void MainWindow::offerWholeDownload(const QString& url, const QString& message)
{
    QUrl link;
    link.setScheme(kLinkScheme);
    link.setPath(kDownloadPath);
    QUrlQuery query;
    query.addQueryItem(QStringLiteral("url"), QString::fromLatin1(QUrl::toPercentEncoding(url)));
    link.setQuery(query);
    showError(message, tr("%1 <a href='%2'>Download the whole file</a> (into a temporary file; what it holds is "
                          "read from there)")
                           .arg(message.toHtmlEscaped(), QString::fromLatin1(link.toEncoded()).toHtmlEscaped()));
}

void MainWindow::openFileAlone(const QString& path)
{
    startBatch();
    // A file by its absolute path; a remote input (a shard of a set over HTTP) by the input a
    // remote document was opened from.
    const bool remote = isRemoteInput(path);
    const QString wanted = remote ? path : QFileInfo(path).absoluteFilePath();
    for (int i = 0; i < m_tabs->count(); ++i) {
        const auto* v = documentView(i);
        if (v == nullptr) {
            continue;
        }
        const auto& doc = *v->document();
        const QString open = !remote      ? QFileInfo(qs(doc.checkpoint->path)).absoluteFilePath()
                             : doc.remote ? qs(doc.remote->input)
                                          : QString();
        if (open == wanted) {
            m_tabs->setCurrentIndex(i);
            return;
        }
    }
    if (alreadyOpen(wanted, !remote)) {
        return;
    }
    std::erase_if(m_openJobs, [](const auto& j) { return !j->isRunning(); });
    remote ? openRemoteDocument(wanted) : openDocument(wanted, true);
}

bool MainWindow::switchToSet(const sharded::SetLocation& loc)
{
    const QString dir = QFileInfo(qs(loc.dir)).absoluteFilePath();
    for (int i = 0; i < m_tabs->count(); ++i) {
        const auto* v = documentView(i);
        const auto& set = v != nullptr ? v->document()->set : nullptr;
        if (set && set->location.kind == loc.kind && QFileInfo(qs(set->location.dir)).absoluteFilePath() == dir) {
            m_tabs->setCurrentIndex(i);
            return true;
        }
    }
    return false;
}

void MainWindow::openWholeSet(const sharded::SetLocation& loc)
{
    startBatch();
    const QString dir = QFileInfo(qs(loc.dir)).absoluteFilePath();
    if (switchToSet(loc) || alreadyOpen(dir, false)) {
        return;
    }
    std::erase_if(m_openJobs, [](const auto& j) { return !j->isRunning(); });
    openSetAt(loc, dir);
}

bool MainWindow::openAsSet(const QString& path)
{
    // A file read alone (an FSDP rank file) opens as the file it is, its set offered beside it.
    const auto loc = sharded::wholeSetInput(ss(path));
    if (!loc) {
        return false;
    }
    // Its folder, index or another of its files opened it already: one tab per set.
    if (!switchToSet(*loc)) {
        openSetAt(*loc, path);
    }
    return true;
}

void MainWindow::openSetAt(const sharded::SetLocation& loc, const QString& path)
{
    startOpen(
        path, path,
        [loc](std::stop_token stop, const OpenProgress& progress) { return loadSetDocument(loc, stop, progress); },
        [this, loc, path](const DocumentPtr& doc, int order) {
            auto* view = addDocument(doc, order, path);
            if (opensAlone(loc, path)) {
                view->offerFileAlone(path);
                updateSetActions();
            }
            rememberRecent(path);
            Q_EMIT setOpened(path);
        },
        [this, loc, path](const QString& message) {
            if (opensAlone(loc, path)) {
                showErrorOfSetFile(message, path);
            } else {
                showError(message);
            }
            Q_EMIT openFailed(path, message);
        });
}

bool MainWindow::isOpening() const
{
    return std::any_of(m_openJobs.begin(), m_openJobs.end(), [](const auto& j) { return j->isRunning(); });
}

DocumentView* MainWindow::addDocument(const DocumentPtr& doc, int order, const QString& input, bool alone)
{
    // The banner stays: it holds the errors of files opened with this one, which are news still.
    auto* view = new DocumentView(doc, m_tabs);
    view->setProperty(kOpenedFrom, input);
    view->setProperty(kOpenedAlone, alone);
    connect(view, &DocumentView::openFileAloneRequested, this, &MainWindow::openFileAlone);
    connect(view, &DocumentView::openFileRequested, this, [this](const QString& file) { openFiles({file}); });
    connect(view->testLoad(), &TestLoadPanel::devicesReady, this, &MainWindow::updateReplayAction);
    // Run > Export writes without showing the panel's result first: the status bar says where.
    connect(view->exportPanel(), &ExportPanel::exportFinished, this, [this](bool ok, const QString& pathOrError) {
        statusBar()->showMessage(ok ? tr("Wrote %1").arg(pathOrError) : tr("Export failed: %1").arg(pathOrError),
                                 15000);
    });
    QString title;
    QString tip;
    if (doc->remote) {
        // Named after the file it reads; the tooltip never shows a query (a pre-signed signature).
        const QUrl url(qs(doc->remote->input));
        title = url.fileName().isEmpty() ? qs(doc->remote->input) : url.fileName();
        tip = url.adjusted(QUrl::RemoveQuery | QUrl::RemoveUserInfo).toString();
    } else if (const auto& folder = doc->checkpoint->folder) {
        // A model folder (a Trainer checkpoint-N/, accelerate's save_state) is named by its folder,
        // which tells one checkpoint-500/model.safetensors from the next.
        const QFileInfo dir(qs(folder->dir));
        title = QStringLiteral("%1/%2").arg(dir.fileName(), qs(folder->model()));
        tip = dir.absoluteFilePath();
    } else {
        const QFileInfo info(qs(doc->checkpoint->path));
        title = info.fileName();
        tip = info.absoluteFilePath();
        // A member of a model folder (optimizer.pt of checkpoint-500/) says which folder, as the
        // folder's own tab does: every checkpoint-N/ holds an optimizer.pt.
        if (!doc->set && readModelFolder(ss(info.absolutePath()))) {
            title = QStringLiteral("%1/%2").arg(info.dir().dirName(), title);
        }
        if (const auto set = doc->set ? std::nullopt : wholeSetOf(tip)) {
            view->offerWholeSet(
                tr("<b>%1</b> is shown alone, as ckptscope inspect --file-only reads it.<br>It is one of the "
                   "files of %2.")
                    .arg(title.toHtmlEscaped(), setPhrase(*set).toHtmlEscaped()));
            connect(view, &DocumentView::openWholeSetRequested, this, [this, loc = *set] { openWholeSet(loc); });
        }
    }
    view->setProperty(kFullTitle, title);
    const int index = m_tabs->insertTab(tabIndexFor(view, order), view, tabTitle(title));
    m_tabs->setTabToolTip(index, tip);
    m_tabs->setCurrentIndex(index);
    updateChrome();
    return view;
}

int MainWindow::tabIndexFor(QWidget* tab, int order) const
{
    tab->setProperty(kOpenOrder, order);
    int index = m_tabs->count();
    if (order < 0) {
        return index;
    }
    // Files opened together are read in parallel and finish in any order: a tab goes before the
    // first tab that was asked for after it, so tabs come in the order they were asked for.
    for (int i = 0; i < m_tabs->count(); ++i) {
        const QVariant other = m_tabs->widget(i)->property(kOpenOrder);
        if (other.isValid() && other.toInt() > order) {
            return i;
        }
    }
    return index;
}

void MainWindow::closeTab(int index)
{
    if (index < 0 || index >= m_tabs->count()) {
        return;
    }
    auto* w = m_tabs->widget(index);
    m_tabs->removeTab(index);
    delete w;  // its job trackers stop and join their workers
    updateChrome();
}

void MainWindow::switchTab(int step)
{
    const int count = m_tabs->count();
    if (count > 1) {
        m_tabs->setCurrentIndex((m_tabs->currentIndex() + step + count) % count);
    }
}

int MainWindow::documentCount() const
{
    return m_tabs->count();
}

DocumentView* MainWindow::documentView(int i) const
{
    return qobject_cast<DocumentView*>(m_tabs->widget(i));
}

DocumentView* MainWindow::currentView() const
{
    return qobject_cast<DocumentView*>(m_tabs->currentWidget());
}

QString MainWindow::errorText() const
{
    return bannerErrors().join(QLatin1Char('\n'));
}

QStringList MainWindow::bannerErrors() const
{
    QStringList lines;
    if (!m_banner->isHidden()) {
        for (const auto& line : m_bannerLines) {
            lines << line.plain;
        }
    }
    return lines;
}

QString MainWindow::dialogFolder() const
{
    if (const auto* v = currentView()) {
        const QString from = v->property(kOpenedFrom).toString();
        // A file's folder; a folder (a set, a Trainer checkpoint-N/) itself. Not a URL.
        if (const QFileInfo info(from); !from.isEmpty() && !isRemoteInput(from) && info.exists()) {
            return info.isDir() ? info.absoluteFilePath() : info.absolutePath();
        }
    }
    return QSettings().value(kLastFolderKey).toString();
}

void MainWindow::setBannerKind(bool error)
{
    QPalette palette = m_banner->palette();
    palette.setColor(QPalette::Window, error ? QColor(0xfe, 0xd7, 0xd7) : QColor(0xe3, 0xee, 0xfa));
    palette.setColor(QPalette::WindowText, error ? QColor(0x74, 0x2a, 0x2a) : QColor(0x1f, 0x33, 0x4d));
    m_banner->setPalette(palette);
    m_bannerText->setPalette(palette);
    m_bannerIcon->setPixmap((error ? icons::severityError() : icons::severityInfo()).pixmap(16, 16));
    m_banner->setProperty("kind", error ? QStringLiteral("error") : QStringLiteral("info"));
}

void MainWindow::showError(const QString& message, const QString& html, bool error)
{
    // Opened twice in one batch (a file named twice), said once.
    if (std::none_of(m_bannerLines.begin(), m_bannerLines.end(),
                     [&](const BannerLine& line) { return line.plain == message; })) {
        m_bannerLines.append({message, html.isEmpty() ? message.toHtmlEscaped() : html, error});
    }
    renderBanner();
}

void MainWindow::renderBanner()
{
    const int errors = static_cast<int>(
        std::count_if(m_bannerLines.begin(), m_bannerLines.end(), [](const BannerLine& l) { return l.error; }));
    setBannerKind(errors > 0);
    const bool rich = std::any_of(m_bannerLines.begin(), m_bannerLines.end(),
                                  [](const BannerLine& l) { return l.html != l.plain.toHtmlEscaped(); });
    if (m_bannerLines.size() == 1 && !rich) {
        // One error reads as the command line prints it.
        m_bannerText->setTextFormat(Qt::PlainText);
        m_bannerText->setText(m_bannerLines.front().plain);
    } else {
        QStringList html;
        for (const auto& line : m_bannerLines) {
            html << line.html;
        }
        QString text = html.join(QStringLiteral("<br>"));
        if (errors > 1) {
            // Spelled out: without a translation loaded, %n's plural would read "file(s)".
            text = tr("<b>%1 files could not be opened:</b><br>").arg(errors) + text;
        }
        m_bannerText->setTextFormat(Qt::RichText);
        m_bannerText->setText(text);
    }
    m_banner->setVisible(!m_bannerLines.isEmpty());
}

void MainWindow::showErrorOfSetFile(const QString& message, const QString& file)
{
    QUrl link = QUrl::fromLocalFile(file);
    link.setQuery(kAloneQuery);
    showError(message, tr("%1 <a href='%2'>Open %3 alone</a>")
                           .arg(message.toHtmlEscaped(), QString::fromLatin1(link.toEncoded()),
                                QFileInfo(file).fileName().toHtmlEscaped()));
}

bool MainWindow::offerFolder(const QString& folder)
{
    const auto files = checkpointFilesIn(folder);
    if (files.isEmpty()) {
        return false;  // a torch.distributed.checkpoint folder: the reader says what it is
    }
    const QDir dir(folder);
    QStringList names;
    QStringList links;
    for (const auto& f : files) {
        names << dir.relativeFilePath(f);
        links << QStringLiteral("<a href='%1'>%2</a>")
                     .arg(QString::fromLatin1(QUrl::fromLocalFile(f).toEncoded()), names.back().toHtmlEscaped());
    }
    const QString name = QFileInfo(folder).fileName();
    const QString sentence = tr("%1 is a folder. Open one of its checkpoint files: %2");
    // Not an error: what the folder holds.
    showError(sentence.arg(name, names.join(QStringLiteral(" · "))),
              sentence.arg(name.toHtmlEscaped(), links.join(QStringLiteral(" · "))), false);
    Q_EMIT folderOffered(folder, files);
    return true;
}

void MainWindow::updateChrome()
{
    auto* view = currentView();
    m_stack->setCurrentIndex(m_tabs->count() > 0 ? 1 : 0);
    updateSetActions();
    updateReplayAction();
    if (!view) {
        setWindowTitle(QStringLiteral("ckptscope"));
        m_formatLabel->clear();
        m_tensorsLabel->clear();
        m_devicesLabel->clear();
        statusBar()->clearMessage();  // "Opened in 1 ms" is about a tab no longer there
        return;
    }
    const auto& ck = *view->document()->checkpoint;
    const auto& remote = view->document()->remote;
    setWindowTitle(QStringLiteral("%1 — ckptscope").arg(view->property(kFullTitle).toString()));
    QString format = qs(formatName(ck.format));
    if (const auto& set = view->document()->set) {
        // A set's view is the torch file its consolidation writes: the set's own kind says more.
        format = tr("%1, %n file(s)", nullptr, static_cast<int>(set->listing.files.size()))
                     .arg(qs(sharded::setKindName(set->location.kind)));
    } else if (ck.format != Format::Safetensors && ck.pickleProtocol > 0) {
        format += tr(", pickle protocol %1").arg(ck.pickleProtocol);
    }
    m_formatLabel->setText(format);
    m_tensorsLabel->setText(tr("%n tensor(s)", nullptr, static_cast<int>(ck.tensors.size())));
    QStringList perDevice;
    for (const auto& [location, bytes] : ck.bytesByLocation()) {
        perDevice << QStringLiteral("%1 %2").arg(qs(location), humanSize(bytes));
    }
    m_devicesLabel->setText(perDevice.join(QStringLiteral(" · ")));
    QString opened = tr("Opened in %1 ms").arg(view->document()->openSeconds * 1000.0, 0, 'f', 0);
    if (remote) {
        // What reading it has cost so far: the bytes that describe it, and any tensor read since.
        opened += tr(", %1 read over HTTP in %n request(s)", nullptr, static_cast<int>(remote->requests->load()))
                      .arg(humanSize(remote->bytesRead->load()));
    }
    statusBar()->showMessage(opened, remote ? 15000 : 4000);
}

void MainWindow::updateReplayAction()
{
    const auto* v = currentView();
    findChild<QAction*>(QStringLiteral("ddpReplayAction"))
        ->setEnabled(v != nullptr && v->offersTestLoad() && v->testLoad()->offersReplay());
}

void MainWindow::updateSetActions()
{
    const auto* doc = currentView();
    const QString alone = doc != nullptr ? doc->openedFile() : QString();
    m_fileAloneAction->setEnabled(!alone.isEmpty());
    m_fileAloneAction->setText(alone.isEmpty() ? tr("Open This File &Alone")
                                               : tr("Open %1 &Alone").arg(QFileInfo(alone).fileName()));
    m_wholeSetAction->setEnabled(doc != nullptr && doc->offersWholeSet());
    for (auto* action : std::as_const(m_fileTabActions)) {
        action->setEnabled(doc != nullptr);
    }
    m_filesAction->setEnabled(doc != nullptr && doc->hasFiles());
    // What the tab does not offer (a URL's test load, an incomplete set's load and export), the
    // menus do not either.
    findChild<QAction*>(QStringLiteral("testLoadAction"))->setEnabled(doc != nullptr && doc->offersTestLoad());
    findChild<QAction*>(QStringLiteral("exportNowAction"))->setEnabled(doc != nullptr && doc->offersExport());
}

// A file of a set opened by itself is listed apart (recentFilesAlone), so that Open Recent opens it
// alone again rather than as its set, which opening its path does.
void MainWindow::rememberRecent(const QString& path, bool alone)
{
    QSettings settings;
    auto recent = settings.value(QStringLiteral("recentFiles")).toStringList();
    auto opened = settings.value(QStringLiteral("recentFilesAlone")).toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > kMaxRecent) {
        recent.removeLast();
    }
    opened.removeAll(path);
    if (alone) {
        opened.append(path);
    }
    opened.removeIf([&recent](const QString& p) { return !recent.contains(p); });
    settings.setValue(QStringLiteral("recentFiles"), recent);
    settings.setValue(QStringLiteral("recentFilesAlone"), opened);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu()
{
    m_recentMenu->clear();
    const QSettings settings;
    const auto recent = settings.value(QStringLiteral("recentFiles")).toStringList();
    const auto opened = settings.value(QStringLiteral("recentFilesAlone")).toStringList();
    for (const auto& path : recent) {
        const QString name = recentTitle(path);
        const bool alone = opened.contains(path);
        m_recentMenu
            ->addAction(alone ? tr("%1 (this file alone)").arg(name) : name, this,
                        [this, path, alone] { alone ? openFileAlone(path) : openFiles({path}); })
            ->setToolTip(path);
    }
    m_recentMenu->setEnabled(!recent.isEmpty());
    m_recentMenu->setToolTipsVisible(true);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    if (!droppedInputs(event->mimeData()).isEmpty()) {
        event->acceptProposedAction();
    }
}

// Files from a file manager, and links dragged from a browser (the Hub's "download" link, a URL).
void MainWindow::dropEvent(QDropEvent* event)
{
    const auto files = droppedInputs(event->mimeData());
    if (files.isEmpty()) {
        return;
    }
    event->acceptProposedAction();
    openFiles(files);
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("window/state"), saveState());
    // Stop and join every worker before the widgets they report to go away.
    for (auto& job : m_openJobs) {
        job->stopAndWait();
    }
    while (m_tabs->count() > 0) {
        closeTab(0);
    }
    event->accept();
}

}  // namespace ckpt::ui
