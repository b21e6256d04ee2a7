#include "setview.h"

#include "dialogs.h"
#include "icons.h"
#include "jobtracker.h"
#include "setmembership.h"
#include "text.h"

#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTreeView>
#include <QTreeWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <map>

namespace ckpt::ui {

namespace {

enum Column { ColName, ColDType, ColShape, ColDevice, ColSize, ColFile, ColCount };

// A set of at most this many tensors opens fully expanded (about a window's height of rows).
constexpr std::size_t kMaxExpandedSetRows = 40;

}  // namespace

SetView::SetView(sharded::SetLocation loc, std::shared_ptr<const sharded::SetListing> listing, QWidget* parent)
    : QWidget(parent), m_loc(std::move(loc)), m_listing(std::move(listing)), m_partOf(new SetMembershipBar(this)),
      m_header(new QLabel(this)), m_findings(new QTreeWidget(this)), m_tree(new QTreeView(this)),
      m_model(new QStandardItemModel(this)), m_consolidate(new QPushButton(tr("Consolidate…"), this)),
      m_progress(new QProgressBar(this)), m_status(new QLabel(this)), m_jobs(std::make_unique<JobTracker>(this))
{
    const auto& l = *m_listing;
    m_header->setTextFormat(Qt::RichText);
    m_header->setWordWrap(true);
    m_header->setText(tr("<b>%1</b> — %2<br>%n tensor(s), %3 in %4 file(s)", nullptr, static_cast<int>(l.rows.size()))
                          .arg(QFileInfo(qs(l.dir)).fileName().toHtmlEscaped(),
                               qs(sharded::setKindName(l.kind)).toHtmlEscaped(), humanSize(l.totalBytes()))
                          .arg(l.files.size()));
    m_consolidate->setToolTip(tr("Write the whole set as one checkpoint file (ckptscope convert DIR -o OUT)"));
    m_progress->hide();
    m_status->setWordWrap(true);

    m_findings->setHeaderHidden(true);
    m_findings->setRootIsDecorated(false);
    m_findings->setWordWrap(true);
    m_tree->setModel(m_model);
    m_tree->setUniformRowHeights(true);
    m_tree->setAlternatingRowColors(true);
    m_tree->setSortingEnabled(false);

    auto* top = new QHBoxLayout;
    top->addWidget(m_header, 1);
    top->addWidget(m_consolidate, 0, Qt::AlignTop);
    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(m_findings);
    split->addWidget(m_tree);
    split->setStretchFactor(0, 0);
    split->setStretchFactor(1, 1);
    auto* lay = new QVBoxLayout(this);
    lay->addWidget(m_partOf);
    lay->addLayout(top);
    lay->addWidget(split, 1);
    lay->addWidget(m_progress);
    lay->addWidget(m_status);

    fillFindings();
    fillTree();
    // The findings pane starts at the height of its rows (up to 5), not at half the window; the
    // one line that says all is well may be lower than a scroll area's usual minimum.
    const int rows = std::min(5, m_findings->topLevelItemCount());
    const int rowHeight = m_findings->fontMetrics().height() + 6;
    const int paneHeight = rows * rowHeight + 2 * m_findings->frameWidth() + 4;
    if (m_listing->findings.empty()) {
        m_findings->setMinimumHeight(paneHeight);
    }
    split->setSizes({paneHeight, 10000});
    connect(m_consolidate, &QPushButton::clicked, this, &SetView::askAndConsolidate);
    connect(m_partOf, &SetMembershipBar::activated, this, [this] { Q_EMIT openFileAloneRequested(m_openedFile); });
    m_jobs->setProgressHandler(
        [this](double fraction, const QString&) { m_progress->setValue(static_cast<int>(fraction * 100)); });
}

SetView::~SetView() = default;

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
    for (const auto& f : l.findings) {
        auto* item = new QTreeWidgetItem(m_findings);
        item->setText(0, QStringLiteral("%1 — %2").arg(qs(f.title), qs(f.detail)));
        item->setToolTip(0, qs(f.code));
        item->setIcon(0, f.severity == "error"     ? icons::severityError()
                         : f.severity == "warning" ? icons::severityWarning()
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
    auto* h = m_tree->header();
    // Names whole; the file list (every rank file of a ZeRO or DCP tensor) takes what is left and
    // is elided when it is longer.
    h->setStretchLastSection(true);
    for (int c = ColName; c < ColFile; ++c) {
        h->setSectionResizeMode(c, QHeaderView::ResizeToContents);
    }
    // A small set opens with every tensor in view; a large one with its top-level folders open,
    // so the model's parts are visible at once.
    if (m_listing->rows.size() <= kMaxExpandedSetRows) {
        m_tree->expandAll();
        return;
    }
    for (int r = 0; r < m_model->rowCount(); ++r) {
        m_tree->expand(m_model->index(r, 0));
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
    m_consolidate->setEnabled(false);
    m_progress->setValue(0);
    m_progress->show();
    m_status->setText(tr("Writing %1…").arg(QFileInfo(path).fileName()));
    m_jobs->start(
        [loc = m_loc, out = ss(path)](std::stop_token, const ProgressFn&) {
            // The file `ckptscope convert DIR -o OUT` writes: a ZeRO param group as zero_to_fp32's one storage.
            sharded::zero::Options options;
            options.groupStorages = true;
            return sharded::consolidateSet(loc, out, options);
        },
        [this, path](Expected<sharded::ConsolidateResult> r) {
            m_progress->hide();
            m_consolidate->setEnabled(true);
            if (!r) {
                const QString msg = qs(r.error().describe());
                m_status->setText(msg);
                Q_EMIT failed(msg);
                return;
            }
            m_status->setText(tr("Wrote %1: %n tensor(s), %2", nullptr, static_cast<int>(r->tensors))
                                  .arg(QFileInfo(path).fileName(), humanSize(r->bytes)));
            Q_EMIT consolidated(path);
        });
}

}  // namespace ckpt::ui
