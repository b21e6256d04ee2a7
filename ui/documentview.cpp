#include "documentview.h"

#include "checkpoint/layout.h"
#include "columnfit.h"
#include "detailspanel.h"
#include "exportpanel.h"
#include "findingspanel.h"
#include "folderfilespanel.h"
#include "jobtracker.h"
#include "keytreemodel.h"
#include "keytreeproxy.h"
#include "moduletreemodel.h"
#include "setfilespanel.h"
#include "setmembership.h"
#include "testloadpanel.h"
#include "text.h"

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QShortcut>
#include <QSplitter>
#include <QStackedWidget>
#include <QTabWidget>
#include <QTimer>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>

#include <algorithm>
#include <unordered_set>

namespace ckpt::ui {
namespace {

// Ancestors expanded for a highlighted finding: enough to show where it is, bounded so that a
// finding over 40k keys does not expand the whole tree.
constexpr std::size_t kMaxExpandedHighlights = 64;
// A filter expands every match up to this many visible rows; past it, the first two levels (a
// broad filter over 40k keys would otherwise build a 40k-row expanded view per keystroke).
constexpr int kMaxExpandAllMatches = 5000;

// The side tabs, in the order they are added: Findings, Test load, Export (and a set's Files).
constexpr int kTestLoadTab = 1;
constexpr int kExportTab = 2;

// A Model view of at most this many rows opens fully expanded.
constexpr int kMaxExpandedModelRows = 40;

// Rows under `parent`, at every depth.
int rowsBelow(const QAbstractItemModel& model, const QModelIndex& parent)
{
    int rows = model.rowCount(parent);
    for (int r = 0; r < model.rowCount(parent); ++r) {
        rows += rowsBelow(model, model.index(r, 0, parent));
    }
    return rows;
}

// A panel whose minimum size must not push the window bigger: it scrolls instead.
QScrollArea* scrolling(QWidget* panel, QWidget* parent)
{
    auto* area = new QScrollArea(parent);
    area->setObjectName(panel->objectName() + QStringLiteral("Scroll"));
    area->setWidget(panel);
    area->setWidgetResizable(true);
    area->setFrameShape(QFrame::NoFrame);
    return area;
}

}  // namespace

DocumentView::DocumentView(DocumentPtr doc, QWidget* parent)
    : QWidget(parent), m_doc(std::move(doc)), m_partOf(new SetMembershipBar(this)), m_model(new KeyTreeModel(this)),
      m_proxy(new KeyTreeProxy(this)), m_filter(new QLineEdit(this)), m_filterStatus(new QLabel(this)),
      m_filterTimer(new QTimer(this)), m_tree(new QTreeView(this)), m_moduleModel(new ModuleTreeModel(this)),
      m_moduleTree(new QTreeView(this)), m_trees(new QStackedWidget(this)), m_modelToggle(new QToolButton(this)),
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
    auto* clearFilter = new QShortcut(QKeySequence(Qt::Key_Escape), m_filter, nullptr, nullptr, Qt::WidgetShortcut);
    connect(clearFilter, &QShortcut::activated, this, [this] {
        m_filter->clear();
        applyFilter();  // at once: Esc is a deliberate act, not typing
    });
    m_filterStatus->setObjectName(QStringLiteral("filterStatus"));
    m_filterStatus->setStyleSheet(QStringLiteral("color: gray"));
    m_filterStatus->hide();

    m_tree->setObjectName(QStringLiteral("keyTree"));
    m_tree->setModel(m_proxy);
    m_tree->setUniformRowHeights(true);  // needed for 40k rows: no per-row size queries
    m_tree->setSortingEnabled(true);
    m_tree->sortByColumn(-1, Qt::AscendingOrder);  // file order until a header is clicked
    m_tree->setAlternatingRowColors(true);
    m_tree->setSelectionMode(QAbstractItemView::SingleSelection);
    m_tree->setAllColumnsShowFocus(true);
    // Long keys differ at their ends ("...layer3.4.conv2.weight"): cut the middle, the tooltip
    // has the whole path.
    m_tree->setTextElideMode(Qt::ElideMiddle);
    // Name keeps its keys' last two segments and takes what is left; long values are elided
    // first; the user's widths are kept.
    m_treeColumns = new ColumnFitter(m_tree, KeyTreeModel::Name, QStringLiteral("documentView/keyTreeHeader"));
    connect(m_tree, &QTreeView::expanded, m_treeColumns, &ColumnFitter::refit);
    m_tree->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_tree, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
        const auto index = m_tree->indexAt(pos);
        if (!index.isValid()) {
            return;
        }
        auto* menu = contextMenuFor(index);
        menu->setAttribute(Qt::WA_DeleteOnClose);
        menu->popup(m_tree->viewport()->mapToGlobal(pos));
    });
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
    m_moduleTree->setObjectName(QStringLiteral("moduleTree"));
    m_moduleTree->setModel(m_moduleModel);
    m_moduleTree->setUniformRowHeights(true);
    m_moduleTree->setAlternatingRowColors(true);
    m_moduleTree->setAllColumnsShowFocus(true);
    m_moduleTree->setTextElideMode(Qt::ElideMiddle);
    m_moduleColumns =
        new ColumnFitter(m_moduleTree, ModuleTreeModel::Name, QStringLiteral("documentView/moduleTreeHeader"));
    connect(m_moduleTree, &QTreeView::expanded, m_moduleColumns, &ColumnFitter::refit);
    connect(m_moduleTree->selectionModel(), &QItemSelectionModel::currentChanged, this,
            [this](const QModelIndex& current) {
                if (current.isValid()) {
                    m_details->showNode(NodeIndex{current.data(ModuleTreeModel::NodeRole).toUInt()});
                }
            });
    const bool hasModel = m_moduleModel->setDocument(m_doc);
    // A small model shows every parameter at once, as state_dict() would list them.
    if (rowsBelow(*m_moduleModel, {}) <= kMaxExpandedModelRows) {
        m_moduleTree->expandAll();
    } else {
        m_moduleTree->expandToDepth(0);
    }
    m_trees->addWidget(m_tree);
    m_trees->addWidget(m_moduleTree);
    m_modelToggle->setObjectName(QStringLiteral("modelViewToggle"));
    m_modelToggle->setText(tr("Model view"));
    m_modelToggle->setCheckable(true);
    m_modelToggle->setToolTip(tr("The module hierarchy as print(model) shows it, with parameter counts; off: the "
                                 "raw pickle, every attribute of every module"));
    m_modelToggle->setVisible(hasModel);
    connect(m_modelToggle, &QToolButton::toggled, this, &DocumentView::showModelView);
    auto* filterRow = new QHBoxLayout;
    filterRow->addWidget(m_filter, 1);
    filterRow->addWidget(m_modelToggle);
    leftLayout->addLayout(filterRow);
    leftLayout->addWidget(m_filterStatus);
    leftLayout->addWidget(m_trees, 1);
    // A pickled model opens as the model; the pickle is a click away.
    showModelView(hasModel);

    m_sideTabs->setObjectName(QStringLiteral("sideTabs"));
    connect(m_findings, &FindingsPanel::highlightPaths, this, &DocumentView::highlight);
    connect(m_findings, &FindingsPanel::fixRequested, this, &DocumentView::onFix);
    connect(m_findings, &FindingsPanel::openFileRequested, this, &DocumentView::openFileRequested);
    m_details->setDocument(m_doc);  // before the findings: selecting the first one shows a key's details
    m_findings->setDocument(m_doc);
    m_testLoad->setDocument(m_doc);
    m_export->setDocument(m_doc);
    // Panels taller than their share scroll rather than grow the window.
    m_sideTabs->addTab(m_findings, tr("Findings (…)"));
    m_sideTabs->addTab(scrolling(m_testLoad, m_sideTabs), tr("Test load"));
    m_sideTabs->addTab(scrolling(m_export, m_sideTabs), tr("Export"));
    m_sideTabs->setTabToolTip(0, tr("What will go wrong when this file is loaded (Ctrl+1)"));
    m_sideTabs->setTabToolTip(1, tr("Load it on a device while watching memory (Ctrl+2)"));
    m_sideTabs->setTabToolTip(2, tr("Write a fixed copy (Ctrl+3 or Ctrl+E)"));
    if (m_doc->remote) {
        // The engines read local files; a URL is exported (or downloaded) first.
        m_sideTabs->setTabEnabled(kTestLoadTab, false);
        m_sideTabs->setTabToolTip(kTestLoadTab,
                                  tr("Test load reads a local file: export this checkpoint (or download it) "
                                     "and open the copy"));
    }
    if (m_doc->checkpoint->folder) {
        // The folder's other files (its optimizer, scheduler, configs), each opened in a tab of its own.
        m_folderFiles = new FolderFilesPanel(this);
        m_folderFiles->setDocument(m_doc);
        const int tab = m_sideTabs->addTab(m_folderFiles, tr("Files (%1)").arg(m_folderFiles->count()));
        m_sideTabs->setTabToolTip(tab, tr("The files of this folder, and what each is (Ctrl+4)"));
        connect(m_folderFiles, &FolderFilesPanel::openFileRequested, this, &DocumentView::openFileRequested);
    }
    if (m_doc->set) {
        m_setFiles = new SetFilesPanel(this);
        m_setFiles->setDocument(m_doc);
        m_sideTabs->addTab(m_setFiles, tr("Files (%1)").arg(m_setFiles->count()));
        m_sideTabs->setTabToolTip(3, tr("The files of this set, and each one opened alone (Ctrl+4)"));
        connect(m_setFiles, &SetFilesPanel::openFileRequested, this, &DocumentView::openFileAloneRequested);
        if (!m_doc->set->notWhole.empty()) {
            // Its tensors are listed, but no byte can be read: nothing to load or write.
            m_unreadable = new QLabel(this);
            m_unreadable->setObjectName(QStringLiteral("unreadableSetBar"));
            m_unreadable->setWordWrap(true);
            m_unreadable->setTextFormat(Qt::RichText);
            m_unreadable->setAutoFillBackground(true);
            m_unreadable->setStyleSheet(
                QStringLiteral("QLabel { background: #fbe3e3; color: #7a1010; padding: 6px; border-radius: 3px; }"));
            m_unreadable->setText(tr("<b>This set cannot be read whole:</b> %1<br>Its tensors are listed from what "
                                     "could be read; test load and export need every file (see Findings and Files).")
                                      .arg(qs(m_doc->set->notWhole).toHtmlEscaped()));
            for (int tab : {kTestLoadTab, kExportTab}) {
                m_sideTabs->setTabEnabled(tab, false);
                m_sideTabs->setTabToolTip(tab, tr("The set cannot be read whole"));
            }
        }
    }

    m_rightSplit = new QSplitter(Qt::Vertical, this);
    m_rightSplit->setObjectName(QStringLiteral("rightSplitter"));
    m_rightSplit->addWidget(scrolling(m_details, m_rightSplit));
    m_rightSplit->addWidget(m_sideTabs);
    m_rightSplit->setStretchFactor(0, 1);
    m_rightSplit->setStretchFactor(1, 1);
    m_rightSplit->setChildrenCollapsible(false);
    m_rightSplit->setSizes({320, 580});  // a tensor's details fit; the chart and plan get the rest

    m_mainSplit = new QSplitter(Qt::Horizontal, this);
    m_mainSplit->setObjectName(QStringLiteral("mainSplitter"));
    m_mainSplit->addWidget(left);
    m_mainSplit->addWidget(m_rightSplit);
    m_mainSplit->setStretchFactor(0, 3);
    m_mainSplit->setStretchFactor(1, 2);
    m_mainSplit->setChildrenCollapsible(false);
    m_mainSplit->setSizes({720, 560});  // scaled to the window: the tree gets the larger share
    // The panes keep the sizes the user gave them, across tabs and sessions.
    const QSettings settings;
    m_mainSplit->restoreState(settings.value(QStringLiteral("documentView/mainSplitter")).toByteArray());
    m_rightSplit->restoreState(settings.value(QStringLiteral("documentView/rightSplitter")).toByteArray());
    connect(m_mainSplit, &QSplitter::splitterMoved, this, &DocumentView::saveSplitters);
    connect(m_rightSplit, &QSplitter::splitterMoved, this, &DocumentView::saveSplitters);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_partOf);
    if (m_unreadable != nullptr) {
        layout->addWidget(m_unreadable);
    }
    layout->addWidget(m_mainSplit, 1);
    // The bar offers the whole set on a file's tab, the file alone on a set's.
    connect(m_partOf, &SetMembershipBar::activated, this, [this] {
        if (m_openedFile.isEmpty()) {
            Q_EMIT openWholeSetRequested();
        } else {
            Q_EMIT openFileAloneRequested(m_openedFile);
        }
    });
    startDiagnosis();
}

bool DocumentView::offersWholeSet() const
{
    return !m_partOf->isHidden() && m_openedFile.isEmpty();  // a set's own bar offers the file instead
}

void DocumentView::offerWholeSet(const QString& sentence)
{
    m_partOf->offer(sentence, tr("Open the Whole Set"));
}

void DocumentView::offerFileAlone(const QString& file)
{
    if (!m_doc->set) {
        return;
    }
    m_openedFile = file;
    const QString name = QFileInfo(file).fileName();
    m_partOf->offer(tr("Opened as part of %1<br>You opened <b>%2</b>, one of its files.")
                        .arg(setPhrase(m_doc->set->location).toHtmlEscaped(), name.toHtmlEscaped()),
                    tr("Open This File Alone"));
    m_partOf->button()->setToolTip(tr("Show %1's own contents, as ckptscope inspect --file-only lists them").arg(name));
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
    // A row the user picked in either tree stays picked; otherwise the worst finding is selected.
    const bool picked = m_tree->currentIndex().isValid() || m_moduleTree->currentIndex().isValid();
    m_autoHighlight = true;
    m_findings->setFindings(m_diagnosis, !picked);
    m_autoHighlight = false;
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
    m_sideTabs->setCurrentIndex(kExportTab);
}

void DocumentView::showFindings()
{
    m_sideTabs->setCurrentIndex(0);
}

void DocumentView::showTestLoad()
{
    m_sideTabs->setCurrentIndex(kTestLoadTab);
}

bool DocumentView::offersTestLoad() const
{
    return m_sideTabs->isTabEnabled(kTestLoadTab);
}

bool DocumentView::offersExport() const
{
    return m_sideTabs->isTabEnabled(kExportTab);
}

void DocumentView::showFiles()
{
    if (m_setFiles != nullptr) {
        m_sideTabs->setCurrentWidget(m_setFiles);
    } else if (m_folderFiles != nullptr) {
        m_sideTabs->setCurrentWidget(m_folderFiles);
    }
}

bool DocumentView::modelViewShown() const
{
    return m_trees->currentWidget() == m_moduleTree;
}

void DocumentView::showModelView(bool on)
{
    on = on && m_moduleModel->rowCount() > 0;
    m_trees->setCurrentWidget(on ? static_cast<QWidget*>(m_moduleTree) : m_tree);
    const QSignalBlocker block(m_modelToggle);
    m_modelToggle->setChecked(on);
}

void DocumentView::saveSplitters()
{
    QSettings settings;
    settings.setValue(QStringLiteral("documentView/mainSplitter"), m_mainSplit->saveState());
    settings.setValue(QStringLiteral("documentView/rightSplitter"), m_rightSplit->saveState());
}

void DocumentView::rememberExpansion()
{
    m_expandedBeforeFilter.clear();
    std::vector<QModelIndex> stack{QModelIndex()};
    while (!stack.empty()) {
        const auto parent = stack.back();
        stack.pop_back();
        for (int r = 0; r < m_proxy->rowCount(parent); ++r) {
            const auto index = m_proxy->index(r, 0, parent);
            if (m_tree->isExpanded(index)) {
                m_expandedBeforeFilter.push_back(KeyTreeModel::nodeOf(m_proxy->mapToSource(index)));
                stack.push_back(index);
            }
        }
    }
}

void DocumentView::restoreExpansion(NodeIndex current)
{
    m_tree->collapseAll();
    for (const auto node : m_expandedBeforeFilter) {
        m_tree->expand(m_proxy->mapFromSource(m_model->indexOfNode(node)));
    }
    m_expandedBeforeFilter.clear();
    if (current.valid()) {
        const auto index = m_proxy->mapFromSource(m_model->indexOfNode(current));
        for (auto p = index.parent(); p.isValid(); p = p.parent()) {
            m_tree->expand(p);
        }
        m_tree->setCurrentIndex(index);
        m_tree->scrollTo(index, QAbstractItemView::PositionAtCenter);
    }
}

void DocumentView::applyFilter()
{
    const bool filtering = !m_filter->text().trimmed().isEmpty();
    const NodeIndex current = m_lastCurrent;
    if (filtering && !m_filtering) {
        rememberExpansion();
    }
    if (filtering) {
        showModelView(false);  // the filter is over key paths, which the raw tree shows
    }
    m_refiltering = true;
    m_proxy->setFilterText(m_filter->text());
    m_refiltering = false;
    if (filtering) {
        // A match under a collapsed node would be invisible: show every one.
        if (m_proxy->matchCount() <= kMaxExpandAllMatches) {
            m_tree->expandAll();
        } else {
            m_tree->expandToDepth(1);
        }
    } else if (m_filtering) {
        restoreExpansion(current);
    }
    m_filtering = filtering;
    m_filterStatus->setText(filterStatus());
    m_filterStatus->setVisible(filtering);
    Q_EMIT filterApplied();
}

QString DocumentView::filterStatus() const
{
    if (m_proxy->filterText().trimmed().isEmpty()) {
        return {};
    }
    const auto total = static_cast<int>(m_doc->checkpoint->nodes.size()) - 1;  // the root is no key
    // Spelled out: without a translation loaded, %n's plural would read "key(s)".
    const QString keys = total == 1 ? tr("1 key") : tr("%1 keys").arg(total);
    if (m_proxy->matchCount() == 0) {
        return tr("No key matches \u201c%1\u201d (%2 in the file).").arg(m_proxy->filterText().trimmed(), keys);
    }
    return tr("%1 of %2").arg(m_proxy->matchCount()).arg(keys);
}

QString DocumentView::valueText(const QModelIndex& index) const
{
    const auto node = KeyTreeModel::nodeOf(m_proxy->mapToSource(index));
    const auto& ck = *m_doc->checkpoint;
    const auto& n = ck.nodes[node];
    if (n.kind == NodeKind::Tensor && n.tensor.valid()) {
        const auto& t = ck.tensors[n.tensor];
        return QStringLiteral("%1 %2 %3").arg(qs(dtypeName(t.dtype)), qs(tensorShapeText(ck, t)), qs(t.location));
    }
    if (n.kind == NodeKind::Scalar) {
        return qs(pickle::shortRepr(ck.arena, n.value, 1U << 16U));
    }
    if (n.object.valid()) {
        return qs(ck.objects[n.object].type);
    }
    return index.sibling(index.row(), KeyTreeModel::Shape).data().toString();
}

void DocumentView::expandAllBelow(const QModelIndex& index)
{
    m_tree->expandRecursively(index.sibling(index.row(), 0));
}

void DocumentView::collapseAllBelow(const QModelIndex& index)
{
    std::vector<QModelIndex> stack{index.sibling(index.row(), 0)};
    while (!stack.empty()) {
        const auto i = stack.back();
        stack.pop_back();
        if (!m_tree->isExpanded(i)) {
            continue;  // nothing below a collapsed row is expanded-and-visible to collapse
        }
        m_tree->collapse(i);
        for (int r = 0; r < m_proxy->rowCount(i); ++r) {
            stack.push_back(m_proxy->index(r, 0, i));
        }
    }
}

QMenu* DocumentView::contextMenuFor(const QModelIndex& index)
{
    auto* menu = new QMenu(this);
    menu->setObjectName(QStringLiteral("treeContextMenu"));
    const QPersistentModelIndex row(index.sibling(index.row(), 0));
    const auto path = row.data(KeyTreeModel::PathRole).toString();
    menu->addAction(tr("Copy Key Path"), this, [path] { QApplication::clipboard()->setText(path); })
        ->setObjectName(QStringLiteral("copyPathAction"));
    menu->addAction(tr("Copy Value"), this, [this, row] { QApplication::clipboard()->setText(valueText(row)); })
        ->setObjectName(QStringLiteral("copyValueAction"));
    menu->addSeparator();
    const bool hasChildren = m_proxy->hasChildren(row);
    auto* expand = menu->addAction(tr("Expand All Below"), this, [this, row] { expandAllBelow(row); });
    expand->setObjectName(QStringLiteral("expandBelowAction"));
    expand->setEnabled(hasChildren);
    auto* collapse = menu->addAction(tr("Collapse All Below"), this, [this, row] { collapseAllBelow(row); });
    collapse->setObjectName(QStringLiteral("collapseBelowAction"));
    collapse->setEnabled(hasChildren);
    menu->addSeparator();
    auto* drop = menu->addAction(tr("Add to Drop in Export"), this, [this, path] {
        m_export->addDropPath(path);
        showExport();
    });
    drop->setObjectName(QStringLiteral("addDropAction"));
    drop->setEnabled(!path.isEmpty());
    auto* root = menu->addAction(tr("Select as Export Root"), this, [this, path] {
        m_export->setSelectRoot(path);
        showExport();
    });
    root->setObjectName(QStringLiteral("selectRootAction"));
    root->setEnabled(!path.isEmpty() && hasChildren);
    return menu;
}

void DocumentView::onCurrentChanged(const QModelIndex& current)
{
    if (!current.isValid()) {
        m_details->clearNode();
        return;
    }
    const auto node = KeyTreeModel::nodeOf(m_proxy->mapToSource(current));
    if (!m_refiltering) {
        m_lastCurrent = node;
    }
    m_details->showNode(node);
}

bool DocumentView::selectPath(const QString& path)
{
    showModelView(false);  // a key path is the raw tree's
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
    m_moduleModel->setHighlighted(nodes);  // the Model view shows the same keys tinted
    m_model->setHighlighted(std::move(nodes));
    if (first.isValid()) {
        // The first key concerned becomes the selection, so its details explain the finding too.
        m_tree->setCurrentIndex(first);
        m_tree->scrollTo(first, QAbstractItemView::PositionAtCenter);
    }
    m_tree->viewport()->update();
    if (modelViewShown()) {
        highlightInModelView(paths, first.isValid());
    }
}

void DocumentView::highlightInModelView(const std::vector<std::string>& paths, bool rawRowSelected)
{
    const auto& ck = *m_doc->checkpoint;
    const bool allShown = std::all_of(paths.begin(), paths.end(), [&](const std::string& path) {
        return m_moduleModel->indexOfNode(ck.find(path)).isValid();
    });
    if (!allShown && rawRowSelected && !m_autoHighlight) {
        // The user asked about something the Model view has no row for (an optimizer, a numpy
        // array, a Namespace, a module's plain attribute): show it where it is, in the raw pickle,
        // where every key concerned is highlighted and the first selected. The toggle, now off,
        // leads back.
        showModelView(false);
        return;
    }
    // The finding picked when the file opens must not leave the Model view the file opened in:
    // failing a row of its own, the module that holds the object stands for it there.
    if (!selectInModelView(paths, false)) {
        selectInModelView(paths, true);
    }
}

bool DocumentView::selectInModelView(const std::vector<std::string>& paths, bool orHolder)
{
    const auto& ck = *m_doc->checkpoint;
    for (const auto& path : paths) {
        for (auto node = ck.find(path); node.valid(); node = orHolder ? ck.nodes[node].parent : NodeIndex{}) {
            if (const auto row = m_moduleModel->indexOfNode(node); row.isValid()) {
                const auto current = m_moduleTree->currentIndex();
                if (current.isValid() && current.siblingAtColumn(0) == row) {
                    m_details->showNode(node);  // the raw tree's selection took the details over
                } else {
                    m_moduleTree->setCurrentIndex(row);
                }
                m_moduleTree->scrollTo(row, QAbstractItemView::PositionAtCenter);
                return true;
            }
        }
    }
    return false;
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
