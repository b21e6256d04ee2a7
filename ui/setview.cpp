#include "setview.h"

#include "columnfit.h"
#include "dialogs.h"
#include "icons.h"
#include "setmembership.h"
#include "sharded/consolidate_progress.h"
#include "text.h"

#include <QDir>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QShortcut>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTimer>
#include <QTreeView>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <stop_token>

namespace ckpt::ui {

namespace {

enum Column { ColName, ColDType, ColShape, ColDevice, ColSize, ColFile, ColCount };

// A set of at most this many tensors opens fully expanded (about a window's height of rows).
constexpr std::size_t kMaxExpandedSetRows = 40;
// The whole dotted key of a tree row (a folder's prefix), which the filter matches.
constexpr int kKeyRole = Qt::UserRole + 1;
// The index of a finding in the listing, on its row of the findings list.
constexpr int kFindingRole = Qt::UserRole + 2;
constexpr int kProgressPollMs = 100;
// Equal splitter shares (the splitter scales them to its width).
constexpr int kHalf = 500;

// The first finding that makes the set impossible to consolidate (severity error), or null.
const sharded::SetFinding* firstError(const sharded::SetListing& l)
{
    const auto it = std::find_if(l.findings.begin(), l.findings.end(),
                                 [](const sharded::SetFinding& f) { return f.severity == diagnose::Severity::Error; });
    return it == l.findings.end() ? nullptr : &*it;
}

std::mutex& observerMutex()
{
    static std::mutex m;
    return m;
}
std::function<void(std::uint64_t)>& consolidateObserver()
{
    static std::function<void(std::uint64_t)> observer;
    return observer;
}

}  // namespace

// What a consolidation's worker and its tab share; the worker holds it after the tab is gone.
struct ConsolidateJob {
    std::stop_source stop;
    std::atomic<std::uint64_t> written{0};
};

void SetView::setConsolidateObserverForTest(std::function<void(std::uint64_t)> observer)
{
    const std::lock_guard lock(observerMutex());
    consolidateObserver() = std::move(observer);
}

SetView::SetView(sharded::SetLocation loc, std::shared_ptr<const sharded::SetListing> listing, QWidget* parent)
    : QWidget(parent), m_loc(std::move(loc)), m_listing(std::move(listing)), m_partOf(new SetMembershipBar(this)),
      m_header(new QLabel(this)), m_findings(new QTreeWidget(this)), m_findingDetails(new QLabel(this)),
      m_filter(new QLineEdit(this)), m_tree(new QTreeView(this)), m_model(new QStandardItemModel(this)),
      m_proxy(new QSortFilterProxyModel(this)), m_consolidate(new QPushButton(tr("Consolidate…"), this)),
      m_cancel(new QPushButton(tr("Cancel"), this)), m_progress(new QProgressBar(this)),
      m_progressTimer(new QTimer(this)), m_status(new QLabel(this))
{
    const auto& l = *m_listing;
    m_header->setTextFormat(Qt::RichText);
    m_header->setWordWrap(true);
    m_header->setText(tr("<b>%1</b> — %2<br>%n tensor(s), %3 in %4 file(s)", nullptr, static_cast<int>(l.rows.size()))
                          .arg(QFileInfo(qs(l.dir)).fileName().toHtmlEscaped(),
                               qs(sharded::setKindName(l.kind)).toHtmlEscaped(), humanSize(l.totalBytes()))
                          .arg(l.files.size()));
    m_consolidate->setToolTip(tr("Write the whole set as one checkpoint file (ckptscope convert DIR -o OUT)"));
    // An incomplete set is refused before anything is written: the button says so instead of
    // offering a write that can only fail.
    if (const auto* missing = firstError(l)) {
        m_consolidate->setEnabled(false);
        m_consolidate->setToolTip(
            tr("The set cannot be consolidated: %1 (see the findings above)").arg(qs(missing->title)));
    }
    m_progress->hide();
    m_cancel->setObjectName(QStringLiteral("consolidateCancel"));
    m_cancel->hide();
    m_progressTimer->setInterval(kProgressPollMs);
    m_status->setWordWrap(true);

    m_findings->setObjectName(QStringLiteral("setFindings"));
    m_findings->setHeaderHidden(true);
    m_findings->setRootIsDecorated(false);
    m_findings->setWordWrap(true);
    // The selected finding in full, wrapped and scrollable: a list row has room for one line only.
    m_findingDetails->setObjectName(QStringLiteral("setFindingDetails"));
    m_findingDetails->setWordWrap(true);
    m_findingDetails->setTextFormat(Qt::RichText);
    m_findingDetails->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_findingDetails->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_findingDetails->setContentsMargins(6, 4, 6, 4);
    auto* detailsScroll = new QScrollArea(this);
    detailsScroll->setWidget(m_findingDetails);
    detailsScroll->setWidgetResizable(true);
    detailsScroll->setFrameShape(QFrame::NoFrame);
    detailsScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);  // the text wraps instead
    auto* findingsSplit = new QSplitter(Qt::Horizontal, this);
    findingsSplit->addWidget(m_findings);
    findingsSplit->addWidget(detailsScroll);
    findingsSplit->setStretchFactor(0, 1);
    findingsSplit->setStretchFactor(1, 1);
    findingsSplit->setSizes({kHalf, kHalf});         // the list and the text side by side, half each
    detailsScroll->setVisible(!l.findings.empty());  // "No problems found" needs no second copy

    m_filter->setObjectName(QStringLiteral("setFilterEdit"));
    m_filter->setPlaceholderText(tr("Filter keys (Ctrl+F)"));
    m_filter->setClearButtonEnabled(true);
    auto* clearFilter = new QShortcut(QKeySequence(Qt::Key_Escape), m_filter, nullptr, nullptr, Qt::WidgetShortcut);
    connect(clearFilter, &QShortcut::activated, m_filter, &QLineEdit::clear);
    m_proxy->setSourceModel(m_model);
    m_proxy->setRecursiveFilteringEnabled(true);
    m_proxy->setFilterRole(kKeyRole);
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
    m_tree->setModel(m_proxy);
    m_tree->setUniformRowHeights(true);
    m_tree->setAlternatingRowColors(true);
    m_tree->setSortingEnabled(false);

    auto* top = new QHBoxLayout;
    top->addWidget(m_header, 1);
    top->addWidget(m_consolidate, 0, Qt::AlignTop);
    auto* treePane = new QWidget(this);
    auto* treeLayout = new QVBoxLayout(treePane);
    treeLayout->setContentsMargins(0, 0, 0, 0);
    treeLayout->addWidget(m_filter);
    treeLayout->addWidget(m_tree, 1);
    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(findingsSplit);
    split->addWidget(treePane);
    split->setStretchFactor(0, 0);
    split->setStretchFactor(1, 1);
    auto* lay = new QVBoxLayout(this);
    lay->addWidget(m_partOf);
    lay->addLayout(top);
    lay->addWidget(split, 1);
    auto* progressRow = new QHBoxLayout;
    progressRow->addWidget(m_progress, 1);
    progressRow->addWidget(m_cancel);
    lay->addLayout(progressRow);
    lay->addWidget(m_status);

    fillFindings();
    fillTree();
    // The findings pane starts at the height of its rows (up to 5), not at half the window; the
    // one line that says all is well may be lower than a scroll area's usual minimum.
    // With findings, room for five lines of the selected one's text beside the list.
    const int rows = m_listing->findings.empty() ? 1 : 5;
    const int rowHeight = m_findings->fontMetrics().height() + 6;
    const int paneHeight = rows * rowHeight + 2 * m_findings->frameWidth() + 4;
    if (m_listing->findings.empty()) {
        m_findings->setMinimumHeight(paneHeight);
    }
    split->setSizes({paneHeight, 10000});
    connect(m_consolidate, &QPushButton::clicked, this, &SetView::askAndConsolidate);
    connect(m_cancel, &QPushButton::clicked, this, &SetView::cancelConsolidate);
    connect(m_progressTimer, &QTimer::timeout, this, &SetView::showConsolidateProgress);
    connect(m_partOf, &SetMembershipBar::activated, this, [this] { Q_EMIT openFileAloneRequested(m_openedFile); });
    connect(m_findings, &QTreeWidget::currentItemChanged, this, &SetView::showFindingDetails);
    connect(m_filter, &QLineEdit::textChanged, this, &SetView::applyFilter);
    if (m_findings->topLevelItemCount() > 0) {
        m_findings->setCurrentItem(m_findings->topLevelItem(0));
    }
    showFindingDetails();
}

// Never waits for a consolidation: it is asked to stop and finishes on its own, removing its
// temporary file (the tab's watcher goes with the tab, so nothing reports back).
SetView::~SetView()
{
    if (m_job) {
        m_job->stop.request_stop();
    }
}

bool SetView::isConsolidating() const
{
    return m_job != nullptr;
}

void SetView::focusFilter()
{
    m_filter->setFocus();
    m_filter->selectAll();
}

void SetView::applyFilter()
{
    m_proxy->setFilterFixedString(m_filter->text().trimmed());
    if (!m_filter->text().trimmed().isEmpty()) {
        m_tree->expandAll();  // a match deep in the tree is in view at once
    }
}

void SetView::showFindingDetails()
{
    const auto* item = m_findings->currentItem();
    const QVariant index = item != nullptr ? item->data(0, kFindingRole) : QVariant();
    if (!index.isValid()) {
        m_findingDetails->setText(item != nullptr ? item->text(0).toHtmlEscaped() : QString());
        return;
    }
    const auto& f = m_listing->findings.at(index.toULongLong());
    QString html = QStringLiteral("<b>%1</b> <span style='color:gray'>(%2)</span><p>%3</p>")
                       .arg(qs(f.title).toHtmlEscaped(), qs(f.code).toHtmlEscaped(), qs(f.detail).toHtmlEscaped());
    if (!f.paths.empty()) {
        QStringList paths;
        for (const auto& p : f.paths) {
            paths << qs(p).toHtmlEscaped();
        }
        html += tr("<p>Concerns: %1</p>").arg(paths.join(QStringLiteral(", ")));
    }
    m_findingDetails->setText(html);
}

QString SetView::statusText() const
{
    return m_status->text();
}

void SetView::offerFileAlone(const QString& file)
{
    m_openedFile = file;
    const QString name = QFileInfo(file).fileName();
    m_partOf->offer(tr("Opened as part of %1<br>You opened <b>%2</b>, one of its files.")
                        .arg(setPhrase(m_loc).toHtmlEscaped(), name.toHtmlEscaped()),
                    tr("Open This File Alone"));
    m_partOf->button()->setToolTip(tr("Show %1's own contents, as ckptscope inspect --file-only lists them").arg(name));
}

void SetView::fillFindings()
{
    const auto& l = *m_listing;
    if (l.findings.empty()) {
        auto* item = new QTreeWidgetItem(m_findings);
        item->setText(0, tr("No problems found with the set: every file is present and every listed tensor is in "
                            "its file."));
        item->setIcon(0, icons::severityInfo());
        return;
    }
    for (std::size_t i = 0; i < l.findings.size(); ++i) {
        const auto& f = l.findings[i];
        auto* item = new QTreeWidgetItem(m_findings);
        item->setText(0, QStringLiteral("%1 — %2").arg(qs(f.title), qs(f.detail)));
        item->setToolTip(0, qs(f.code));
        item->setData(0, kFindingRole, QVariant::fromValue<qulonglong>(i));
        item->setIcon(0, f.severity == diagnose::Severity::Error     ? icons::severityError()
                         : f.severity == diagnose::Severity::Warning ? icons::severityWarning()
                                                                     : icons::severityInfo());
    }
}

void SetView::fillTree()
{
    m_model->setHorizontalHeaderLabels(
        {tr("Name"), tr("DType"), tr("Shape"), tr("Device"), tr("Size"), tr("Stored in")});
    // Dotted keys (`model.layers.0.attn.weight`) become folders, created on first use; a folder's
    // size is the sum of what is under it.
    std::map<QString, QList<QStandardItem*>> folders;
    auto folderFor = [&](const QString& key) {
        QStandardItem* parent = m_model->invisibleRootItem();
        QString at;
        const auto parts = key.split(QLatin1Char('.'));
        for (qsizetype i = 0; i + 1 < parts.size(); ++i) {
            at += (at.isEmpty() ? QString() : QStringLiteral(".")) + parts[i];
            auto it = folders.find(at);
            if (it == folders.end()) {
                QList<QStandardItem*> row;
                row << new QStandardItem(parts[i]);
                row.front()->setData(at, kKeyRole);
                for (int c = 1; c < ColCount; ++c) {
                    row << new QStandardItem;
                }
                for (auto* item : row) {
                    item->setEditable(false);
                }
                parent->appendRow(row);
                it = folders.emplace(at, row).first;
            }
            parent = it->second[ColName];
        }
        return std::make_pair(parent, parts.back());
    };
    // A tied name's bytes are its key's, so folders count them once.
    std::map<QString, std::uint64_t> folderBytes;
    for (const auto& r : m_listing->rows) {
        const QString key = qs(r.key);
        auto [parent, leaf] = folderFor(key);
        const QString where = r.tiedTo.empty() ? qs(r.storedIn) : tr("tied to %1").arg(qs(r.tiedTo));
        QList<QStandardItem*> row;
        row << new QStandardItem(leaf) << new QStandardItem(qs(dtypeName(r.dtype)))
            << new QStandardItem(shapeText(r.shape)) << new QStandardItem(qs(r.location))
            << new QStandardItem(humanSize(r.nbytes)) << new QStandardItem(where);
        row[ColName]->setToolTip(key);
        row[ColName]->setData(key, kKeyRole);
        row[ColFile]->setToolTip(qs(r.storedIn));
        for (auto* item : row) {
            item->setEditable(false);
        }
        parent->appendRow(row);
        QString at;
        const auto parts = key.split(QLatin1Char('.'));
        for (qsizetype i = 0; i + 1 < parts.size(); ++i) {
            at += (at.isEmpty() ? QString() : QStringLiteral(".")) + parts[i];
            folderBytes[at] += r.tiedTo.empty() ? r.nbytes : 0;
        }
    }
    for (auto& [path, row] : folders) {
        row[ColSize]->setText(humanSize(folderBytes[path]));
    }
    // Name keeps its keys' last two segments; the file list (every rank file of a ZeRO or DCP
    // tensor) is elided first; widths dragged by hand are kept.
    auto* columns = new ColumnFitter(m_tree, ColName, QStringLiteral("setView/treeHeader"));
    connect(m_tree, &QTreeView::expanded, columns, &ColumnFitter::refit);
    m_tree->setTextElideMode(Qt::ElideMiddle);
    // A small set opens with every tensor in view; a large one with its top-level folders open,
    // so the model's parts are visible at once.
    if (m_listing->rows.size() <= kMaxExpandedSetRows) {
        m_tree->expandAll();
        return;
    }
    for (int r = 0; r < m_proxy->rowCount(); ++r) {
        m_tree->expand(m_proxy->index(r, 0));
    }
}

void SetView::askAndConsolidate()
{
    const QString suggested =
        QFileInfo(qs(m_listing->dir))
            .absoluteDir()
            .filePath(QFileInfo(qs(m_listing->dir)).fileName() + QStringLiteral("-consolidated.pt"));
    const QString out = dialogs::saveFileName(this, tr("Consolidate into one checkpoint"), suggested,
                                              tr("PyTorch checkpoint (*.pt *.pth *.bin)"));
    if (!out.isEmpty()) {
        consolidateTo(out);
    }
}

void SetView::consolidateTo(const QString& path)
{
    if (m_job) {
        return;  // one at a time: the button is disabled while one runs
    }
    m_consolidate->setEnabled(false);
    m_progress->setValue(0);
    m_progress->setFormat(QStringLiteral("%p%"));
    m_progress->show();
    m_cancel->setEnabled(true);
    m_cancel->show();
    m_status->setText(tr("Writing %1…").arg(QFileInfo(path).fileName()));
    m_job = std::make_shared<ConsolidateJob>();
    auto future = QtConcurrent::run([loc = m_loc, out = ss(path), job = m_job] {
        // Each report records the bytes written (the tab polls them) and stops the write once
        // the tab asked: Cancel, or the tab was closed.
        const sharded::ConsolidateProgressScope progress([&job](std::uint64_t written) {
            job->written.store(written, std::memory_order_relaxed);
            {
                const std::lock_guard lock(observerMutex());
                if (consolidateObserver()) {
                    consolidateObserver()(written);
                }
            }
            return !job->stop.stop_requested();
        });
        // The file `ckptscope convert DIR -o OUT` writes: a ZeRO param group as zero_to_fp32's one storage.
        sharded::zero::Options options;
        options.groupStorages = true;
        auto r = sharded::consolidateSet(loc, out, options);
        if (r && job->stop.stop_requested()) {
            // Cancelled after the last check, while the file was committed: a cancel leaves nothing.
            std::error_code ec;
            std::filesystem::remove(r->path, ec);
            r = makeError(ErrorCode::Cancelled, "consolidation cancelled; nothing was written");
        }
        return std::make_shared<Expected<sharded::ConsolidateResult>>(std::move(r));
    });
    using Result = std::shared_ptr<Expected<sharded::ConsolidateResult>>;
    auto* watcher = new QFutureWatcher<Result>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, path] {
        watcher->deleteLater();
        consolidateFinished(*watcher->result(), path);
    });
    watcher->setFuture(future);
    m_progressTimer->start();
}

void SetView::cancelConsolidate()
{
    if (!m_job) {
        return;
    }
    m_job->stop.request_stop();
    m_cancel->setEnabled(false);
    m_status->setText(tr("Cancelling…"));
}

void SetView::showConsolidateProgress()
{
    if (!m_job) {
        return;
    }
    // The output is about the set's size (a pickle and zip headers more): the bar stops short of
    // the end until the file is committed.
    const std::uint64_t written = m_job->written.load(std::memory_order_relaxed);
    const std::uint64_t total = std::max<std::uint64_t>(m_listing->totalBytes(), 1);
    const int percent = static_cast<int>(std::min<std::uint64_t>(99, written * 100 / total));
    m_progress->setValue(percent);
    m_progress->setFormat(tr("%1 of %2").arg(humanSize(std::min(written, total)), humanSize(total)));
}

void SetView::consolidateFinished(const Expected<sharded::ConsolidateResult>& r, const QString& path)
{
    m_job.reset();
    m_progressTimer->stop();
    m_progress->hide();
    m_cancel->hide();
    m_consolidate->setEnabled(firstError(*m_listing) == nullptr);
    if (!r) {
        const QString msg = r.error().code == ErrorCode::Cancelled
                                ? tr("Cancelled: %1 was not written.").arg(QFileInfo(path).fileName())
                                : qs(r.error().describe());
        m_status->setText(msg);
        Q_EMIT failed(msg);
        return;
    }
    m_status->setText(tr("Wrote %1: %n tensor(s), %2", nullptr, static_cast<int>(r->tensors))
                          .arg(QFileInfo(path).fileName(), humanSize(r->bytes)));
    Q_EMIT consolidated(path);
}

}  // namespace ckpt::ui
