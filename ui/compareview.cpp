#include "compareview.h"

#include "busytext.h"
#include "columnfit.h"
#include "diagnose/values.h"
#include "dialogs.h"
#include "histogramwidget.h"
#include "jobtracker.h"
#include "screenfit.h"
#include "text.h"

#include <QCheckBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileInfo>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QMimeData>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTreeView>
#include <QVBoxLayout>

#include <map>

namespace ckpt::ui {
namespace {

constexpr int kDiffRole = Qt::UserRole + 1;   // "diff" on rows that differ, "" on the rest
constexpr int kEntryRole = Qt::UserRole + 2;  // index into Result::entries, -1 for folders

enum Column { ColKeyA, ColKeyB, ColStatus, ColDetail, ColCount };

QString statusText(diff::Status s)
{
    switch (s) {
    case diff::Status::OnlyA:
        return CompareView::tr("only in A");
    case diff::Status::OnlyB:
        return CompareView::tr("only in B");
    case diff::Status::Renamed:
        return CompareView::tr("renamed");
    case diff::Status::Changed:
        return CompareView::tr("changed");
    case diff::Status::Equal:
        return CompareView::tr("equal");
    }
    return {};
}

// A coloured disc with the status's sign, drawn once per status: the colour alone must not carry
// the meaning.
const QIcon& statusIcon(diff::Status s)
{
    static std::map<diff::Status, QIcon> icons;
    auto it = icons.find(s);
    if (it != icons.end()) {
        return it->second;
    }
    static const std::map<diff::Status, QString> signs{{diff::Status::OnlyA, QStringLiteral("−")},
                                                       {diff::Status::OnlyB, QStringLiteral("+")},
                                                       {diff::Status::Renamed, QStringLiteral("→")},
                                                       {diff::Status::Changed, QStringLiteral("≠")},
                                                       {diff::Status::Equal, QStringLiteral("=")}};
    QPixmap pm(32, 32);
    pm.fill(Qt::transparent);
    QPainter p(&pm);
    p.setRenderHint(QPainter::Antialiasing);
    p.setBrush(CompareView::statusColor(s).darker(130));
    p.setPen(Qt::NoPen);
    p.drawEllipse(2, 2, 28, 28);
    p.setPen(Qt::white);
    QFont f = p.font();
    f.setPixelSize(22);
    f.setBold(true);
    p.setFont(f);
    p.drawText(QRect(0, 0, 32, 32), Qt::AlignCenter, signs.at(s));
    p.end();
    return icons.emplace(s, QIcon(pm)).first->second;
}

QString detailText(const diff::Entry& e, const Checkpoint& a, const Checkpoint& b)
{
    const TensorEntry* ta = e.tensorA.valid() ? &a.tensors[e.tensorA] : nullptr;
    const TensorEntry* tb = e.tensorB.valid() ? &b.tensors[e.tensorB] : nullptr;
    if (ta == nullptr && tb == nullptr) {
        if (e.status == diff::Status::OnlyA) {
            return qs(e.valueA);
        }
        if (e.status == diff::Status::OnlyB) {
            return qs(e.valueB);
        }
        return e.changes != 0 ? qs(e.valueA) + QStringLiteral(" → ") + qs(e.valueB) : qs(e.valueA);
    }
    const TensorEntry* t = ta != nullptr ? ta : tb;
    QString s = qs(dtypeName(t->dtype)) + QLatin1Char(' ') + shapeText(t->shape);
    if (ta == nullptr || tb == nullptr) {
        return s;
    }
    QStringList parts;
    if ((e.changes & diff::kDType) != 0) {
        parts << qs(dtypeName(ta->dtype)) + QStringLiteral(" → ") + qs(dtypeName(tb->dtype));
    }
    if ((e.changes & diff::kShape) != 0) {
        parts << shapeText(ta->shape) + QStringLiteral(" → ") + shapeText(tb->shape);
    }
    if ((e.changes & diff::kStride) != 0) {
        parts << CompareView::tr("stride %1 → %2").arg(shapeText(ta->stride), shapeText(tb->stride));
    }
    if ((e.changes & diff::kDevice) != 0) {
        parts << qs(ta->location) + QStringLiteral(" → ") + qs(tb->location);
    }
    if ((e.changes & diff::kQuantizer) != 0) {
        parts << CompareView::tr("quantizer %1 → %2").arg(qs(e.quantizerA), qs(e.quantizerB));
    }
    const auto& v = e.values;
    if (!v.note.empty()) {
        parts << qs(v.note);
    } else if (v.differing > 0) {
        parts << CompareView::tr("%1 of %2 differ, max abs %3, max rel %4%5")
                     .arg(v.differing)
                     .arg(ta->numel)
                     .arg(v.maxAbs, 0, 'g', 4)
                     .arg(v.maxRel, 0, 'g', 4)
                     .arg(v.allclose ? CompareView::tr(", allclose") : QString());
    } else if (v.identicalBytes) {
        parts << CompareView::tr("identical bytes");
    }
    return parts.isEmpty() ? s : parts.join(QStringLiteral("; "));
}

QString statsHtml(const QString& side, const Expected<diagnose::TensorStats>& st)
{
    if (!st) {
        return side + QStringLiteral(": ") + errorHtml(qs(st.error().message));
    }
    return QStringLiteral("<b>%1</b> %2, %3 elements<br>min %4, max %5<br>mean %6, std %7<br>NaN %8, Inf %9")
        .arg(side, qs(dtypeName(st->dtype)))
        .arg(st->numel)
        .arg(st->min, 0, 'g', 6)
        .arg(st->max, 0, 'g', 6)
        .arg(st->mean, 0, 'g', 6)
        .arg(st->std, 0, 'g', 6)
        .arg(st->nan)
        .arg(st->inf);
}

struct Opened {
    std::shared_ptr<const diff::Side> b;
    Expected<diff::Result> result = makeError(ErrorCode::Internal, "not run");
};

struct Stats {
    Expected<diagnose::TensorStats> a = makeError(ErrorCode::Internal, "not run");
    Expected<diagnose::TensorStats> b = makeError(ErrorCode::Internal, "not run");
    Expected<diff::DiffHistogram> hist = makeError(ErrorCode::Internal, "not run");
};

}  // namespace

QColor CompareView::statusColor(diff::Status s)
{
    switch (s) {
    case diff::Status::OnlyA:
        return {0xf4, 0xc7, 0xc3};  // red: gone
    case diff::Status::OnlyB:
        return {0xc8, 0xe6, 0xc9};  // green: added
    case diff::Status::Renamed:
        return {0xbb, 0xde, 0xfb};  // blue: moved
    case diff::Status::Changed:
        return {0xff, 0xe0, 0xb2};  // orange: changed
    case diff::Status::Equal:
        return {0xee, 0xee, 0xee};
    }
    return {};
}

CompareView::CompareView(CheckpointPtr a, QWidget* parent)
    : QWidget(parent), m_a(std::move(a)), m_header(new QLabel(this)), m_progress(new QProgressBar(this)),
      m_cancel(new QPushButton(tr("Cancel"), this)), m_diffOnly(new QCheckBox(tr("Differences only"), this)),
      m_model(new QStandardItemModel(this)), m_proxy(new QSortFilterProxyModel(this)), m_tree(new QTreeView(this)),
      m_statsA(new QLabel(this)), m_statsB(new QLabel(this)), m_histogram(new HistogramWidget(this)),
      m_compareJobs(std::make_unique<JobTracker>(this)), m_statsJobs(std::make_unique<JobTracker>(this))
{
    setObjectName(QStringLiteral("compareView"));
    setAcceptDrops(true);
    m_header->setObjectName(QStringLiteral("compareHeader"));
    m_header->setWordWrap(true);
    m_header->setTextFormat(Qt::RichText);
    m_header->setText(tr("Drop a second checkpoint here to compare it with <b>%1</b>.")
                          .arg(QFileInfo(qs(m_a->path)).fileName().toHtmlEscaped()));
    m_progress->setObjectName(QStringLiteral("compareProgress"));
    m_progress->setRange(0, 1000);
    m_progress->hide();
    m_cancel->setObjectName(QStringLiteral("compareCancel"));
    m_cancel->hide();
    m_diffOnly->setObjectName(QStringLiteral("differencesOnly"));
    m_tree->setObjectName(QStringLiteral("compareTree"));
    m_statsA->setObjectName(QStringLiteral("compareStatsA"));
    m_statsB->setObjectName(QStringLiteral("compareStatsB"));
    m_histogram->setObjectName(QStringLiteral("differenceHistogram"));
    for (auto* l : {m_statsA, m_statsB}) {
        l->setTextFormat(Qt::RichText);
        l->setAlignment(Qt::AlignTop | Qt::AlignLeft);
        l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    }

    m_model->setHorizontalHeaderLabels({tr("Key in A"), tr("Key in B"), tr("Status"), tr("What differs")});
    m_proxy->setSourceModel(m_model);
    m_proxy->setRecursiveFilteringEnabled(true);
    m_proxy->setFilterKeyColumn(ColStatus);
    m_proxy->setFilterRole(kDiffRole);
    m_tree->setModel(m_proxy);
    m_tree->setUniformRowHeights(true);
    m_tree->header()->setSectionResizeMode(ColKeyA, QHeaderView::Interactive);
    m_tree->header()->resizeSection(ColKeyA, 260);
    m_tree->header()->resizeSection(ColKeyB, 220);
    m_tree->header()->resizeSection(ColStatus, 100);
    // Keys are cut as the main tree cuts them, keeping their layer's index and last segment.
    for (const int column : {ColKeyA, ColKeyB}) {
        m_tree->setItemDelegateForColumn(column, new KeyNameDelegate(m_tree));
    }

    auto* top = new QHBoxLayout;
    top->addWidget(m_header, 1);
    top->addWidget(m_progress);
    top->addWidget(m_cancel);
    top->addWidget(m_diffOnly);

    auto* details = new QWidget(this);
    auto* dl = new QHBoxLayout(details);
    dl->addWidget(m_statsA, 1);
    dl->addWidget(m_statsB, 1);
    auto* histBox = new QVBoxLayout;
    auto* histTitle = new QLabel(tr("Histogram of A − B"), details);
    histBox->addWidget(histTitle);
    histBox->addWidget(m_histogram, 1);
    dl->addLayout(histBox, 1);

    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(m_tree);
    split->addWidget(details);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 1);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addWidget(split, 1);

    connect(m_cancel, &QPushButton::clicked, this, &CompareView::cancel);
    connect(m_diffOnly, &QCheckBox::toggled, this, &CompareView::setDifferencesOnly);
    connect(m_tree->selectionModel(), &QItemSelectionModel::currentChanged, this, &CompareView::showSelection);
    m_compareJobs->setProgressHandler([this](double f, const QString& text) {
        m_progress->setValue(static_cast<int>(f * 1000));
        m_progress->setFormat(text);
    });
}

CompareView::~CompareView()
{
    m_statsJobs->stopAndWait();
    m_compareJobs->stopAndWait();
}

bool CompareView::isRunning() const
{
    return m_compareJobs->isRunning();
}

void CompareView::cancel()
{
    m_compareJobs->requestStop();
}

void CompareView::setDifferencesOnly(bool on)
{
    if (m_diffOnly->isChecked() != on) {
        m_diffOnly->setChecked(on);  // toggled() comes back here
        return;
    }
    m_proxy->setFilterFixedString(on ? QStringLiteral("diff") : QString());
    m_tree->expandAll();
}

void CompareView::compareWith(const QString& pathB)
{
    m_progress->setValue(0);
    m_progress->show();
    m_cancel->show();
    m_header->setText(tr("Comparing with %1…").arg(QFileInfo(pathB).fileName().toHtmlEscaped()));
    CheckpointPtr a = m_a;
    const std::string path = ss(pathB);
    m_compareJobs->start(
        [a, path](std::stop_token stop, const ProgressFn& progress) {
            Opened o;
            auto b = diff::openSide(path);
            if (!b) {
                o.result = b.error();
                return o;
            }
            o.b = std::make_shared<const diff::Side>(std::move(*b));
            BusyText busy("Comparing");
            o.result = diff::compare(diff::Side::of(a), *o.b, {}, stop, [&](std::uint64_t done, std::uint64_t total) {
                if (auto text = busy.due(done, total)) {
                    progress(total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total), *text);
                }
            });
            return o;
        },
        [this](Opened o) {
            m_progress->hide();
            m_cancel->hide();
            if (!o.result) {
                const QString msg = qs(o.result.error().describe());
                m_header->setText(errorHtml(msg));
                Q_EMIT failed(msg);
                return;
            }
            showResult(std::make_shared<diff::Result>(std::move(*o.result)), o.b);
        });
}

void CompareView::showResult(std::shared_ptr<diff::Result> r, std::shared_ptr<const diff::Side> b)
{
    m_result = std::move(r);
    m_b = std::move(b);
    const auto& res = *m_result;
    // The verdict `ckptscope diff` gives: how the same weights are stored is no difference in them.
    const QString verdict = res.verdict() == diff::Verdict::Equal         ? tr("Equal")
                            : res.verdict() == diff::Verdict::SameWeights ? tr("Same weights, stored differently")
                                                                          : tr("Differ");
    const QString changed = res.counts.storedDifferently > 0 ? tr("%1 changed, %2 only in how they are stored;")
                                                                   .arg(res.counts.changed)
                                                                   .arg(res.counts.storedDifferently)
                                                             : tr("%1 changed,").arg(res.counts.changed);
    QString head = tr("<b>A</b> %1 &nbsp; <b>B</b> %2<br>%3: %4 %5 renamed, %6 only in A, %7 only in B, %8 equal")
                       .arg(QFileInfo(qs(res.pathA)).fileName().toHtmlEscaped(),
                            QFileInfo(qs(res.pathB)).fileName().toHtmlEscaped(), verdict)
                       .arg(changed)
                       .arg(res.counts.renamed)
                       .arg(res.counts.onlyA)
                       .arg(res.counts.onlyB)
                       .arg(res.counts.equal);
    if (!res.prefixesA.empty() || !res.prefixesB.empty()) {
        head += tr("<br>Wrapper prefixes aligned: A %1, B %2")
                    .arg(qs(res.prefixesA.empty() ? std::string("none") : res.prefixesA.front()).toHtmlEscaped(),
                         qs(res.prefixesB.empty() ? std::string("none") : res.prefixesB.front()).toHtmlEscaped());
    }
    m_header->setText(head);

    m_model->removeRows(0, m_model->rowCount());
    // Folders by key-path component; a folder's row is created the first time a key under it is.
    std::map<QString, QStandardItem*> folders;
    auto folderFor = [&](const QString& path) {
        QStandardItem* parent = m_model->invisibleRootItem();
        QString at;
        const auto parts = path.split(QLatin1Char('/'));
        for (qsizetype i = 0; i + 1 < parts.size(); ++i) {
            at += (at.isEmpty() ? QString() : QStringLiteral("/")) + parts[i];
            auto it = folders.find(at);
            if (it == folders.end()) {
                QList<QStandardItem*> row;
                row << new QStandardItem(parts[i]);
                for (int c = 1; c < ColCount; ++c) {
                    row << new QStandardItem;
                }
                row[0]->setData(-1, kEntryRole);
                parent->appendRow(row);
                it = folders.emplace(at, row[0]).first;
            }
            parent = it->second;
        }
        return std::make_pair(parent, parts.back());
    };
    for (std::size_t i = 0; i < res.entries.size(); ++i) {
        const auto& e = res.entries[i];
        const QString key = qs(e.key);
        auto [parent, leaf] = folderFor(key);
        QList<QStandardItem*> row;
        row << new QStandardItem(statusIcon(e.status), e.status == diff::Status::OnlyB ? QString() : leaf);
        row << new QStandardItem(e.status == diff::Status::OnlyB ? key : qs(e.keyB));
        row << new QStandardItem(statusText(e.status));
        row << new QStandardItem(detailText(e, *m_a, m_b->part(e.partB)));
        if (e.status == diff::Status::OnlyB) {
            row[0]->setText(leaf);
        }
        const bool differs = e.status != diff::Status::Equal;
        for (auto* item : row) {
            item->setEditable(false);
            item->setBackground(statusColor(e.status));
            item->setData(differs ? QStringLiteral("diff") : QString(), kDiffRole);
        }
        row[0]->setData(static_cast<int>(i), kEntryRole);
        parent->appendRow(row);
    }
    m_tree->expandAll();
    Q_EMIT comparisonDone();
}

QString CompareView::statsText() const
{
    return m_statsA->text() + QLatin1Char('\n') + m_statsB->text();
}

void CompareView::showSelection()
{
    m_statsJobs->requestStop();
    m_statsA->clear();
    m_statsB->clear();
    m_histogram->clear();
    if (!m_result || !m_b) {
        return;
    }
    const QModelIndex cur = m_proxy->mapToSource(m_tree->currentIndex());
    const QModelIndex first = cur.sibling(cur.row(), ColKeyA);
    const int idx = first.data(kEntryRole).toInt();
    if (!first.isValid() || idx < 0 || static_cast<std::size_t>(idx) >= m_result->entries.size()) {
        return;
    }
    const auto& e = m_result->entries[static_cast<std::size_t>(idx)];
    if (!e.tensorA.valid() && !e.tensorB.valid()) {
        m_statsA->setText(QStringLiteral("<b>A</b> ") + qs(e.valueA).toHtmlEscaped());
        m_statsB->setText(QStringLiteral("<b>B</b> ") + qs(e.valueB).toHtmlEscaped());
        return;
    }
    CheckpointPtr a = m_a;
    CheckpointPtr b = m_b->parts.at(e.partB);
    const TensorIndex ta = e.tensorA;
    const TensorIndex tb = e.tensorB;
    const bool withHistogram = e.status == diff::Status::Changed && ta.valid() && tb.valid();
    m_statsJobs->start(
        [a, b, ta, tb, withHistogram](std::stop_token stop, const ProgressFn&) {
            Stats s;
            if (ta.valid()) {
                s.a = diagnose::tensorStats(*a, ta, {}, stop);
            }
            if (tb.valid()) {
                s.b = diagnose::tensorStats(*b, tb, {}, stop);
            }
            if (withHistogram) {
                s.hist = diff::differenceHistogram(*a, ta, *b, tb, 32, stop);
            }
            return s;
        },
        [this, ta, tb](Stats s) {
            if (ta.valid()) {
                m_statsA->setText(statsHtml(QStringLiteral("A"), s.a));
            }
            if (tb.valid()) {
                m_statsB->setText(statsHtml(QStringLiteral("B"), s.b));
            }
            if (s.hist) {
                m_histogram->setHistogram(std::move(s.hist->counts), s.hist->low, s.hist->high);
            }
            Q_EMIT statsShown();
        });
}

void CompareView::keyPressEvent(QKeyEvent* event)
{
    // A window of its own, like a dialog: Esc closes it (its children ignore Esc, so it arrives here).
    if (event->key() == Qt::Key_Escape && isWindow()) {
        close();
        return;
    }
    QWidget::keyPressEvent(event);
}

void CompareView::dragEnterEvent(QDragEnterEvent* event)
{
    if (event->mimeData()->hasUrls() && !event->mimeData()->urls().isEmpty() &&
        event->mimeData()->urls().front().isLocalFile()) {
        event->acceptProposedAction();
    }
}

void CompareView::dropEvent(QDropEvent* event)
{
    const auto urls = event->mimeData()->urls();
    if (!urls.isEmpty() && urls.front().isLocalFile()) {
        event->acceptProposedAction();
        compareWith(urls.front().toLocalFile());
    }
}

QSize compareWindowSize(const QWidget* parent)
{
    const QScreen* screen = parent != nullptr ? parent->screen() : QGuiApplication::primaryScreen();
    const QSize preferred(1000, 680);
    if (screen == nullptr) {
        return preferred;
    }
    // Room for the window manager's frame and title bar: the window fits a 1024×700 screen whole.
    const QSize available = screen->availableGeometry().size();
    return preferred.boundedTo(QSize(available.width() * 95 / 100, available.height() * 88 / 100));
}

CompareView* openCompareWindow(QWidget* parent, const CheckpointPtr& a)
{
    // The dialog starts beside A (a file's folder, a set's), where its other versions usually are.
    const QFileInfo first(a ? qs(a->path) : QString());
    const QString folder = first.exists() ? first.absolutePath() : QString();
    const auto names =
        dialogs::openFileNames(parent, CompareView::tr("Compare with"), dialogs::checkpointFilter(), folder);
    if (names.isEmpty() || !a) {
        return nullptr;
    }
    auto* view = new CompareView(a, parent);
    view->setWindowFlag(Qt::Window);
    view->setAttribute(Qt::WA_DeleteOnClose);
    view->setWindowTitle(CompareView::tr("Compare %1 with %2")
                             .arg(QFileInfo(qs(a->path)).fileName(), QFileInfo(names.front()).fileName()));
    view->resize(compareWindowSize(parent));
    // Over the main window and on its screen: left to the window manager, it went to y=335 with its
    // 680 pixels on a 1000-pixel screen, its buttons below the edge.
    placeOver(view, parent);
    view->show();
    view->compareWith(names.front());
    return view;
}

}  // namespace ckpt::ui
