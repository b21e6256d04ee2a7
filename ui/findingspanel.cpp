#include "findingspanel.h"

#include "checkpoint/model_folder.h"
#include "diagnose/report.h"
#include "folderfilespanel.h"
#include "icons.h"
#include "sharded/listing.h"
#include "text.h"

#include <QDir>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QTreeWidget>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>
#include <unordered_set>

namespace ckpt::ui {
namespace {

// Findings rows the list always has room for (the issue saw 2½ at 1024×700).
constexpr int kMinVisibleRows = 3;
// Rows the list grows to when the findings are set, before it scrolls.
constexpr int kMaxFittedRows = 6;

}  // namespace

QString noFindingsText(Format format)
{
    if (format == Format::Safetensors) {
        return FindingsPanel::tr("No findings: safetensors.torch.load_file() reads this file as it is "
                                 "(torch.load cannot read safetensors).");
    }
    return FindingsPanel::tr("No findings: torch.load should read this file as it is.");
}

QString noFindingsText(const Document& doc)
{
    if (doc.set) {
        return FindingsPanel::tr("No findings: %1 reads this set as it is (torch.load reads single files, not a "
                                 "set's folder).")
            .arg(qs(sharded::whatLoadsSet(doc.set->listing)));
    }
    if (doc.checkpoint && doc.checkpoint->folder) {
        const auto& folder = *doc.checkpoint->folder;
        return FindingsPanel::tr("No findings in its model file %1, which %2 reads as it is; the folder (%3) is "
                                 "read by its writer's own loader, not by torch.load.")
            .arg(qs(folder.model()),
                 doc.checkpoint->format == Format::Safetensors ? QStringLiteral("safetensors.torch.load_file")
                                                               : QStringLiteral("torch.load"),
                 qs(folder.layout));
    }
    return noFindingsText(doc.checkpoint ? doc.checkpoint->format : Format::TorchZip);
}

FindingsPanel::FindingsPanel(QWidget* parent)
    : QWidget(parent), m_list(new QTreeWidget(this)), m_detail(new QLabel(this)),
      m_fix(new QPushButton(tr("Fix"), this)), m_fixAll(new QPushButton(tr("Fix all"), this))
{
    setObjectName(QStringLiteral("findingsPanel"));
    m_list->setObjectName(QStringLiteral("findingsList"));
    m_list->setColumnCount(3);
    m_list->setHeaderLabels({tr("Finding"), tr("Code"), tr("Keys")});
    m_list->setRootIsDecorated(false);
    m_list->setUniformRowHeights(true);
    m_list->setAlternatingRowColors(true);
    m_list->header()->setStretchLastSection(false);
    m_list->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    m_list->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    m_list->header()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
    m_detail->setObjectName(QStringLiteral("findingDetail"));
    m_detail->setWordWrap(true);
    m_detail->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::LinksAccessibleByMouse);
    connect(m_detail, &QLabel::linkActivated, this,
            [this](const QString& link) { Q_EMIT openFileRequested(QUrl(link).toLocalFile()); });
    m_detail->setContentsMargins(2, 2, 2, 2);
    m_detail->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    m_fix->setObjectName(QStringLiteral("fixButton"));
    m_fix->setToolTip(tr("Add this finding's fix to the export plan"));
    m_fixAll->setObjectName(QStringLiteral("fixAllButton"));
    m_fixAll->setToolTip(tr("Add every finding's fix to the export plan"));

    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_fix);
    buttons->addWidget(m_fixAll);
    buttons->addStretch(1);
    // The selected finding's text wraps and scrolls, so its last line (the fix) can always be
    // reached; the splitter lets the user trade list rows for text.
    auto* detailScroll = new QScrollArea(this);
    detailScroll->setObjectName(QStringLiteral("findingDetailScroll"));
    detailScroll->setWidget(m_detail);
    detailScroll->setWidgetResizable(true);
    detailScroll->setFrameShape(QFrame::NoFrame);
    detailScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_split = new QSplitter(Qt::Vertical, this);
    m_split->setObjectName(QStringLiteral("findingsSplitter"));
    m_split->addWidget(m_list);
    m_split->addWidget(detailScroll);
    m_split->setChildrenCollapsible(false);
    m_split->setStretchFactor(0, 0);
    m_split->setStretchFactor(1, 1);
    // At least a header and three rows of findings in view, whatever the window's size.
    const int row = m_list->fontMetrics().height() + 8;
    m_list->setMinimumHeight(row * (kMinVisibleRows + 1) + 2 * m_list->frameWidth());
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_split, 1);
    layout->addLayout(buttons);

    connect(m_list, &QTreeWidget::itemSelectionChanged, this, &FindingsPanel::onSelectionChanged);
    connect(m_fix, &QPushButton::clicked, this, [this] {
        if (auto* item = m_list->currentItem()) {
            Q_EMIT fixRequested(item->data(0, Qt::UserRole).toInt());
        }
    });
    connect(m_fixAll, &QPushButton::clicked, this, [this] {
        for (int i = 0; i < m_list->topLevelItemCount(); ++i) {
            auto* item = m_list->topLevelItem(i);
            if (item->data(1, Qt::UserRole).toBool()) {
                Q_EMIT fixRequested(item->data(0, Qt::UserRole).toInt());
            }
        }
    });
    setDocument({});
}

void FindingsPanel::clearList()
{
    m_list->clear();
    m_detail->clear();
    m_fix->setEnabled(false);
    m_fixAll->setEnabled(false);
}

void FindingsPanel::setDocument(DocumentPtr doc)
{
    m_doc = std::move(doc);
    m_findings.reset();
    clearList();
    if (m_doc) {
        m_detail->setText(tr("Diagnosing…"));
    }
}

void FindingsPanel::setFindings(FindingsPtr findings, bool selectFirst)
{
    m_findings = std::move(findings);
    clearList();
    if (!m_doc || !m_findings) {
        return;
    }
    bool anyFix = false;
    for (std::size_t i = 0; i < m_findings->list.size(); ++i) {
        const auto& f = m_findings->list[i];
        auto* item = new QTreeWidgetItem(m_list);
        item->setText(0, qs(f.title));
        item->setText(1, qs(f.code));
        const std::size_t keys = keyCount(f.paths);
        item->setText(2, keys == 0 ? QString() : QString::number(keys));
        item->setTextAlignment(2, Qt::AlignRight | Qt::AlignVCenter);
        item->setToolTip(0, qs(f.detail));
        item->setData(0, Qt::UserRole, static_cast<int>(i));
        item->setData(1, Qt::UserRole, f.fix.has_value());
        switch (f.severity) {
        case diagnose::Severity::Error:
            item->setIcon(0, icons::severityError());
            break;
        case diagnose::Severity::Warning:
            item->setIcon(0, icons::severityWarning());
            break;
        case diagnose::Severity::Info:
            item->setIcon(0, icons::severityInfo());
            break;
        }
        anyFix = anyFix || f.fix.has_value();
    }
    m_fixAll->setEnabled(anyFix);
    fitListToRows();
    if (m_findings->list.empty()) {
        m_detail->setText(noFindingsText(*m_doc));
    } else if (selectFirst) {
        select(0);  // the most severe one, so its explanation is on screen at once
    } else {
        m_detail->setText(
            tr("%n finding(s): select one to see its keys.", nullptr, static_cast<int>(m_findings->list.size())));
    }
    if (!m_findings->error.empty()) {
        m_detail->setText(tr("Diagnosis failed: %1").arg(qs(m_findings->error)));
    }
}

void FindingsPanel::fitListToRows()
{
    // The list as tall as its rows (at least kMinVisibleRows, at most kMaxFittedRows), the text
    // of the selected finding the rest: a few findings should not leave their explanation a
    // two-line slot.
    const int rows = std::clamp(m_list->topLevelItemCount(), kMinVisibleRows, kMaxFittedRows);
    const int row = m_list->topLevelItemCount() > 0 ? static_cast<const QAbstractItemView*>(m_list)->sizeHintForRow(0)
                                                    : m_list->fontMetrics().height() + 8;
    const int height = m_list->header()->sizeHint().height() + rows * row + 2 * m_list->frameWidth();
    m_split->setSizes({height, std::max(1, m_split->height() - height)});
}

int FindingsPanel::count() const
{
    return m_list->topLevelItemCount();
}

int FindingsPanel::indexOfCode(const QString& code) const
{
    for (int i = 0; i < m_list->topLevelItemCount(); ++i) {
        if (m_list->topLevelItem(i)->text(1) == code) {
            return i;
        }
    }
    return -1;
}

void FindingsPanel::select(int finding)
{
    if (finding >= 0 && finding < m_list->topLevelItemCount()) {
        m_list->setCurrentItem(m_list->topLevelItem(finding));
    }
}

std::size_t FindingsPanel::keyCount(const std::vector<std::string>& paths)
{
    // A finding names the dict it is about beside its keys (so the tree highlights both); that
    // container is no key of its own: "All 16 keys" is 16 in the column, not 17.
    std::unordered_set<std::string_view> containers;
    for (const auto& p : paths) {
        if (!p.empty()) {
            containers.insert(std::string_view());
        }
        for (auto slash = p.find('/'); slash != std::string::npos; slash = p.find('/', slash + 1)) {
            containers.insert(std::string_view(p).substr(0, slash));
        }
    }
    return static_cast<std::size_t>(
        std::count_if(paths.begin(), paths.end(), [&](const std::string& p) { return !containers.contains(p); }));
}

QString FindingsPanel::detailText() const
{
    return m_detail->text();
}

QString FindingsPanel::linkFolderMembers(const QString& detail, const ModelFolder& folder)
{
    QString out = detail;
    const QDir dir(qs(folder.dir));
    for (const auto& member : folder.members) {
        const QString name = qs(member.name);
        if (member.name == folder.model() || !FolderFilesPanel::opensAsCheckpoint(name)) {
            continue;
        }
        const QString link =
            QStringLiteral("<a href='%1'>%2</a>")
                .arg(QString::fromLatin1(QUrl::fromLocalFile(dir.filePath(name)).toEncoded()), name.toHtmlEscaped());
        // ModelFolder::memberList writes "name (role)" after ": " or ", ": only whole names match.
        for (const QString& before : {QStringLiteral(": "), QStringLiteral(", ")}) {
            out.replace(before + name.toHtmlEscaped() + QStringLiteral(" ("), before + link + QStringLiteral(" ("));
        }
    }
    return out;
}

QString FindingsPanel::fixText(const transform::Options& fix)
{
    const std::string flags = diagnose::fixFlags(fix);
    return flags.empty() ? tr("Fix: write a new copy as a current torch.save zip; no key or value changes")
                         : tr("Fix: convert with %1").arg(qs(flags));
}

void FindingsPanel::onSelectionChanged()
{
    auto* item = m_list->currentItem();
    if (!item || !m_findings) {
        m_fix->setEnabled(false);
        return;
    }
    const auto& f = m_findings->list[static_cast<std::size_t>(item->data(0, Qt::UserRole).toInt())];
    QString text = qs(f.detail).toHtmlEscaped();
    if (const auto& folder = m_doc->checkpoint->folder; folder && f.code == "model-folder") {
        text = linkFolderMembers(text, *folder);
    }
    QString detail = QStringLiteral("<b>%1</b> <span style='color:gray'>(%2, %3)</span><br>%4")
                         .arg(qs(f.title).toHtmlEscaped(), qs(f.code), qs(diagnose::severityName(f.severity)), text);
    if (f.fix) {
        detail += QStringLiteral("<br><span style='color:gray'>%1</span>").arg(fixText(*f.fix).toHtmlEscaped());
    }
    m_detail->setText(detail);
    m_fix->setEnabled(f.fix.has_value());
    Q_EMIT highlightPaths(f.paths);
}

}  // namespace ckpt::ui
