#include "documentview.h"

#include "detailspanel.h"
#include "exportpanel.h"
#include "findingspanel.h"
#include "jobtracker.h"
#include "keytreemodel.h"
#include "keytreeproxy.h"
#include "testloadpanel.h"
#include "text.h"

#include <QHeaderView>
#include <QLineEdit>
#include <QSplitter>
#include <QTabWidget>
#include <QTimer>
#include <QTreeView>
#include <QVBoxLayout>

#include <unordered_set>

namespace ckpt::ui {
namespace {

// Ancestors expanded for a highlighted finding: enough to show where it is, bounded so that a
// finding over 40k keys does not expand the whole tree.
constexpr std::size_t kMaxExpandedHighlights = 64;

}  // namespace

DocumentView::DocumentView(DocumentPtr doc, QWidget* parent)
    : QWidget(parent), m_doc(std::move(doc)), m_model(new KeyTreeModel(this)), m_proxy(new KeyTreeProxy(this)),
      m_filter(new QLineEdit(this)), m_filterTimer(new QTimer(this)), m_tree(new QTreeView(this)),
      m_details(new DetailsPanel(this)), m_sideTabs(new QTabWidget(this)), m_findings(new FindingsPanel(this)),
      m_testLoad(new TestLoadPanel(this)), m_export(new ExportPanel(this)),
      m_diagnoseJob(std::make_unique<JobTracker>(this))
{
    setObjectName(QStringLiteral("documentView"));
    m_model->setDocument(m_doc);
    m_proxy->setSourceModel(m_model);

    m_filter->setObjectName(QStringLiteral("filterEdit"));
    m_filter->setPlaceholderText(tr("Filter keys (Ctrl+F)"));
    m_filter->setClearButtonEnabled(true);
    m_filter->setAcceptDrops(false);  // a dropped file opens, it is not typed into the filter
    m_filterTimer->setSingleShot(true);
    m_filterTimer->setInterval(kFilterDebounceMs);
    connect(m_filter, &QLineEdit::textChanged, m_filterTimer, qOverload<>(&QTimer::start));
    connect(m_filterTimer, &QTimer::timeout, this, &DocumentView::applyFilter);

    m_tree->setObjectName(QStringLiteral("keyTree"));
    m_tree->setModel(m_proxy);
    m_tree->setUniformRowHeights(true);  // needed for 40k rows: no per-row size queries
    m_tree->setSortingEnabled(true);
    m_tree->sortByColumn(-1, Qt::AscendingOrder);  // file order until a header is clicked
    m_tree->setAlternatingRowColors(true);
    m_tree->setSelectionMode(QAbstractItemView::SingleSelection);
    m_tree->setAllColumnsShowFocus(true);
    auto* header = m_tree->header();
    header->setStretchLastSection(false);
    header->setSectionResizeMode(KeyTreeModel::Name, QHeaderView::Stretch);
    const int em = fontMetrics().horizontalAdvance(QLatin1Char('M'));
    m_tree->setColumnWidth(KeyTreeModel::Kind, em * 8);
    m_tree->setColumnWidth(KeyTreeModel::DType, em * 6);
    m_tree->setColumnWidth(KeyTreeModel::Shape, em * 9);
    m_tree->setColumnWidth(KeyTreeModel::Device, em * 5);
    m_tree->setColumnWidth(KeyTreeModel::Size, em * 6);
    header->setMinimumSectionSize(em * 3);
    connect(m_tree->selectionModel(), &QItemSelectionModel::currentChanged, this,
            [this](const QModelIndex& current) { onCurrentChanged(current); });
    // A small tree is shown expanded one level: the top-level dict is usually a wrapper.
    if (m_model->rowCount() <= 8) {
        m_tree->expandToDepth(0);
    }

    auto* left = new QWidget(this);
    auto* leftLayout = new QVBoxLayout(left);
    leftLayout->setContentsMargins(0, 0, 0, 0);
    leftLayout->setSpacing(4);
    leftLayout->addWidget(m_filter);
    leftLayout->addWidget(m_tree, 1);

    m_sideTabs->setObjectName(QStringLiteral("sideTabs"));
    connect(m_findings, &FindingsPanel::highlightPaths, this, &DocumentView::highlight);
    connect(m_findings, &FindingsPanel::fixRequested, this, &DocumentView::onFix);
    m_details->setDocument(m_doc);  // before the findings: selecting the first one shows a key's details
    m_findings->setDocument(m_doc);
    m_testLoad->setDocument(m_doc);
    m_export->setDocument(m_doc);
    m_sideTabs->addTab(m_findings, tr("Findings (…)"));
    m_sideTabs->addTab(m_testLoad, tr("Test load"));
    m_sideTabs->addTab(m_export, tr("Export"));

    auto* right = new QSplitter(Qt::Vertical, this);
    right->setObjectName(QStringLiteral("rightSplitter"));
    right->addWidget(m_details);
    right->addWidget(m_sideTabs);
    right->setStretchFactor(0, 1);
    right->setStretchFactor(1, 3);
    right->setSizes({250, 650});  // the panels below (plan preview, chart) need the height more

    auto* split = new QSplitter(Qt::Horizontal, this);
    split->setObjectName(QStringLiteral("mainSplitter"));
    split->addWidget(left);
    split->addWidget(right);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    split->setChildrenCollapsible(false);
    split->setSizes({720, 560});  // scaled to the window: the tree gets the larger share

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(split);
    startDiagnosis();
}

DocumentView::~DocumentView()
{
    m_diagnoseJob->stopAndWait();  // before the panels its result would fill go away
}

void DocumentView::startDiagnosis()
{
    m_diagnoseJob->start(
        [doc = m_doc](std::stop_token stop, const ProgressFn&) { return diagnoseDocument(*doc, stop); },
        [this](FindingsPtr findings) { showDiagnosis(std::move(findings)); });
}

void DocumentView::showDiagnosis(FindingsPtr findings)
{
    m_diagnosis = std::move(findings);
    m_findings->setFindings(m_diagnosis, !m_tree->currentIndex().isValid());
    m_sideTabs->setTabText(m_sideTabs->indexOf(m_findings), tr("Findings (%1)").arg(m_findings->count()));
    Q_EMIT findingsReady();
}

void DocumentView::focusFilter()
{
    m_filter->setFocus();
    m_filter->selectAll();
}

void DocumentView::showExport()
{
    m_sideTabs->setCurrentWidget(m_export);
}

void DocumentView::showFindings()
{
    m_sideTabs->setCurrentWidget(m_findings);
}

void DocumentView::showTestLoad()
{
    m_sideTabs->setCurrentWidget(m_testLoad);
}

void DocumentView::applyFilter()
{
    m_proxy->setFilterText(m_filter->text());
    // Matches deep in the tree are only useful when they are visible.
    if (!m_filter->text().trimmed().isEmpty() && m_proxy->rowCount() > 0 && m_proxy->rowCount() < 50) {
        m_tree->expandToDepth(1);
    }
    Q_EMIT filterApplied();
}

void DocumentView::onCurrentChanged(const QModelIndex& current)
{
    if (!current.isValid()) {
        m_details->clearNode();
        return;
    }
    m_details->showNode(KeyTreeModel::nodeOf(m_proxy->mapToSource(current)));
}

bool DocumentView::selectPath(const QString& path)
{
    const auto node = m_doc->checkpoint->find(path.toStdString());
    if (!node.valid()) {
        return false;
    }
    const auto index = m_proxy->mapFromSource(m_model->indexOfNode(node));
    if (!index.isValid()) {
        return false;
    }
    for (auto p = index.parent(); p.isValid(); p = p.parent()) {
        m_tree->expand(p);
    }
    m_tree->setCurrentIndex(index);
    m_tree->scrollTo(index);
    return true;
}

void DocumentView::highlight(const std::vector<std::string>& paths)
{
    std::unordered_set<NodeIndex> nodes;
    QModelIndex first;
    for (const auto& path : paths) {
        const auto node = m_doc->checkpoint->find(path);
        if (!node.valid()) {
            continue;
        }
        nodes.insert(node);
        if (nodes.size() <= kMaxExpandedHighlights) {
            const auto index = m_proxy->mapFromSource(m_model->indexOfNode(node));
            for (auto p = index.parent(); p.isValid(); p = p.parent()) {
                m_tree->expand(p);
            }
            if (!first.isValid()) {
                first = index;
            }
        }
    }
    m_model->setHighlighted(std::move(nodes));
    if (first.isValid()) {
        // The first key concerned becomes the selection, so its details explain the finding too.
        m_tree->setCurrentIndex(first);
        m_tree->scrollTo(first, QAbstractItemView::PositionAtCenter);
    }
    m_tree->viewport()->update();
}

void DocumentView::onFix(int finding)
{
    if (!m_diagnosis) {
        return;
    }
    const auto& f = m_diagnosis->list[static_cast<std::size_t>(finding)];
    if (f.fix) {
        m_export->addFix(*f.fix);
        showExport();
    }
}

}  // namespace ckpt::ui
