#include "exportpanel.h"

#include "batchmodel.h"
#include "busytext.h"
#include "checkpoint/block_quant.h"
#include "dialogs.h"
#include "drops.h"
#include "planmodel.h"
#include "text.h"
#include "transform/transform.h"
#include "wheelguard.h"
#include "write/targets.h"
#include "write/write.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QEvent>
#include <QFileInfo>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QStandardPaths>
#include <QStyledItemDelegate>
#include <QTableView>
#include <QTemporaryFile>
#include <QTimer>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>

namespace ckpt::ui {

namespace {

constexpr int kPlanDebounceMs = 120;
// "Exported" in the window means on disk: nobody timing the window waits on it, and a user may
// unplug the drive next. (The command line is lazy by default, like cp; `--sync` opts in.)
const write::WriteOptions kDurable{write::Durability::Durable};

// Keys and names ("model.encoder.layers.3.attn.q_proj.weight") have no spaces, so a wrapping cell
// would still cut them: this delegate lets them break after '.', '/' and '_' (a zero-width space,
// shown only), so the plan shows the whole key it is about instead of eliding it.
class BreakableKeyDelegate : public QStyledItemDelegate {
public:
    using QStyledItemDelegate::QStyledItemDelegate;

protected:
    void initStyleOption(QStyleOptionViewItem* option, const QModelIndex& index) const override
    {
        QStyledItemDelegate::initStyleOption(option, index);
        QString text;
        text.reserve(option->text.size() * 5 / 4);
        for (const QChar c : std::as_const(option->text)) {
            text += c;
            if (c == QLatin1Char('.') || c == QLatin1Char('/') || c == QLatin1Char('_')) {
                text += QChar(0x200B);
            }
        }
        option->text = text;
    }
};

}  // namespace

bool canWriteIn(const QString& folder)
{
    // Tried, not asked: access(2) answers for the permission bits, not for a read-only mount.
    QTemporaryFile probe(QDir(folder).filePath(QStringLiteral(".ckptscope-probe-XXXXXX")));
    return probe.open();
}

QString writableFallbackFolder()
{
    for (const auto location : {QStandardPaths::DownloadLocation, QStandardPaths::DocumentsLocation}) {
        QString dir = QStandardPaths::writableLocation(location);
        if (!dir.isEmpty() && QFileInfo(dir).isDir() && canWriteIn(dir)) {
            return dir;
        }
    }
    return QDir::homePath();
}

ExportPanel::ExportPanel(QWidget* parent) : QWidget(parent)
{
    setObjectName(QStringLiteral("exportPanel"));
    buildUi();
    m_exportJobs.setProgressHandler([this](double f, const QString& text) {
        m_progress->setValue(static_cast<int>(f * 1000));
        if (!text.isEmpty() && m_exportJobs.isRunning()) {
            m_result->setText(text.toHtmlEscaped());
            Q_EMIT exportProgress(text);
        }
    });
    // Every tab starts from Single-card: a preset chosen for one file (Multi-card's `module.` on
    // every key) is no default for the next one, and a tab keeps what was chosen in it.
    setPreset(SingleCard);
}

void ExportPanel::buildUi()
{
    setAcceptDrops(true);
    auto named = [this](auto* w, const char* name) {
        w->setObjectName(QLatin1String(name));
        return w;
    };
    m_preset = named(new QComboBox(this), "presetCombo");
    m_preset->addItem(tr("Single-card"), int(SingleCard));
    m_preset->addItem(tr("Multi-card (DDP)"), int(MultiCard));
    m_preset->addItem(tr("Custom"), int(Custom));
    m_preset->setToolTip(tr("Single-card: strip wrapper prefixes and map every storage to the CPU.\n"
                            "Multi-card: exactly one module. prefix per key, storages on the CPU."));
    m_format = named(new QComboBox(this), "formatCombo");
    m_format->addItem(tr("PyTorch (.pt)"));
    m_format->addItem(tr("safetensors"));
    m_dequantize = named(new QComboBox(this), "dequantizeCombo");
    m_dequantize->addItem(tr("Keep as stored"), int(DType::Unknown));
    for (const auto t : {DType::BFloat16, DType::Float16, DType::Float32}) {
        m_dequantize->addItem(qs(dtypeName(t)), int(t));
    }
    m_dequantize->setToolTip(tr("Block-quantized FP8 weights (a float8 weight beside its weight_scale_inv) written "
                                "as this dtype, each value float32(weight) x its block's scale, the scales left out"));
    m_strip = named(new QLineEdit(this), "stripEdit");
    m_strip->setPlaceholderText(tr("module., _orig_mod."));
    m_addPrefix = named(new QLineEdit(this), "addPrefixEdit");
    m_mapLocation = named(new QLineEdit(this), "mapLocationEdit");
    m_mapLocation->setPlaceholderText(tr("cpu, or cuda:0=cuda:1,cuda:2=cpu"));
    m_select = named(new QLineEdit(this), "selectEdit");
    m_select->setPlaceholderText(tr("key path that becomes the root, e.g. model"));
    m_drop = named(new QLineEdit(this), "dropEdit");
    m_drop->setPlaceholderText(tr("key paths to remove, e.g. optimizer, scheduler"));
    m_weightsOnly = named(new QCheckBox(tr("Weights only"), this), "weightsOnlyCheck");
    m_weightsOnly->setToolTip(tr("Make torch.load(weights_only=True) accept the file"));
    m_compact = named(new QCheckBox(tr("Compact storages"), this), "compactCheck");
    m_unwrap = named(new QCheckBox(tr("Unwrap modules"), this), "unwrapCheck");
    m_unwrap->setToolTip(tr("Replace a pickled nn.Module by its state dict"));
    m_multiCard = named(new QCheckBox(tr("One module. prefix"), this), "multiCardCheck");
    m_dropExtraState = named(new QCheckBox(tr("Drop _extra_state"), this), "dropExtraStateCheck");
    m_dropExtraState->setToolTip(tr("Leave out every module _extra_state value (TransformerEngine's FP8 state), "
                                    "which is written as dcp_to_torch_save writes it otherwise"));
    for (auto* edit : {m_strip, m_addPrefix, m_mapLocation, m_select, m_drop}) {
        edit->setClearButtonEnabled(true);
        edit->setAcceptDrops(false);  // a dropped file goes to the batch queue, not into a field
        connect(edit, &QLineEdit::textEdited, this, &ExportPanel::fieldsToOptions);
        connect(edit, &QLineEdit::textChanged, edit, &QLineEdit::setToolTip);  // the whole list, however narrow
    }
    for (auto* box : {m_weightsOnly, m_compact, m_unwrap, m_multiCard, m_dropExtraState}) {
        connect(box, &QCheckBox::toggled, this, &ExportPanel::fieldsToOptions);
    }
    connect(m_format, &QComboBox::currentIndexChanged, this, &ExportPanel::fieldsToOptions);
    connect(m_dequantize, &QComboBox::currentIndexChanged, this, &ExportPanel::fieldsToOptions);
    connect(m_preset, &QComboBox::activated, this,
            [this](int i) { setPreset(static_cast<Preset>(m_preset->itemData(i).toInt())); });

    auto* options = new QGroupBox(tr("Options"), this);
    auto* grid = new QGridLayout(options);
    // One field a row and the boxes two a row: the form fits a side pane a third of a 1024 px screen
    // wide, and scrolls (in its scroll area) rather than cutting fields off.
    int row = 0;
    const auto addRow = [&](const QString& label, QWidget* field) {
        auto* name = new QLabel(label, this);
        grid->addWidget(name, row, 0);
        grid->addWidget(field, row, 1);
        ++row;
        return name;
    };
    addRow(tr("Preset:"), m_preset);
    addRow(tr("Format:"), m_format);
    m_dequantizeLabel = addRow(tr("Dequantize FP8:"), m_dequantize);
    addRow(tr("Strip prefixes:"), m_strip);
    addRow(tr("Add prefix:"), m_addPrefix);
    addRow(tr("Map location:"), m_mapLocation);
    addRow(tr("Select:"), m_select);
    addRow(tr("Drop:"), m_drop);
    auto* checks = new QGridLayout;
    checks->addWidget(m_weightsOnly, 0, 0);
    checks->addWidget(m_compact, 0, 1);
    checks->addWidget(m_unwrap, 1, 0);
    checks->addWidget(m_multiCard, 1, 1);
    checks->addWidget(m_dropExtraState, 2, 0);
    checks->setColumnStretch(2, 1);
    grid->addLayout(checks, row, 0, 1, 2);
    grid->setColumnStretch(1, 1);

    m_planModel = new PlanModel(this);
    m_planTable = named(new QTableView(this), "planTable");
    m_planTable->setModel(m_planModel);
    m_planTable->verticalHeader()->hide();
    m_planTable->verticalHeader()->setDefaultSectionSize(fontMetrics().height() + 6);
    m_planTable->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_planTable->setAlternatingRowColors(true);
    // Detail wraps: a row grows to show its whole note (fitPlanRows), the tooltip has it too.
    m_planTable->setWordWrap(true);
    m_planTable->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
    // Step fits what it shows; the others share the rest as the table resizes (fitPlanColumns), and
    // a user may still widen one. Every cell's tooltip has its whole text.
    m_planTable->horizontalHeader()->setSectionResizeMode(PlanModel::Step, QHeaderView::ResizeToContents);
    m_planViewport = m_planTable->viewport();
    m_planViewport->installEventFilter(this);
    m_planTable->setTextElideMode(Qt::ElideMiddle);
    // Detail too: its notes name calls and keys ("load_state_dict") longer than the column, which
    // were cut mid-word ("load_s…_dict").
    for (const int column : {PlanModel::Key, PlanModel::Before, PlanModel::After, PlanModel::Detail}) {
        m_planTable->setItemDelegateForColumn(column, new BreakableKeyDelegate(m_planTable));
    }
    connect(m_planTable->horizontalHeader(), &QHeaderView::sectionResized, this, [this](int column) {
        if (column == PlanModel::Detail) {
            fitPlanRows();
        }
    });
    m_planStatus = named(new QLabel(this), "planStatus");
    m_planStatus->setWordWrap(true);

    m_output = named(new QLineEdit(this), "outputEdit");
    m_output->setAcceptDrops(false);
    connect(m_output, &QLineEdit::textEdited, this, [this] { m_outputEdited = true; });
    m_browse = named(new QPushButton(tr("Browse…"), this), "browseButton");
    m_export = named(new QPushButton(tr("Export"), this), "exportButton");
    m_export->setDefault(true);
    m_export->setToolTip(tr("Write the fixed copy to the output path (Ctrl+Shift+E)"));
    m_cancel = named(new QPushButton(tr("Cancel"), this), "cancelExportButton");
    m_progress = named(new QProgressBar(this), "exportProgress");
    m_progress->setRange(0, 1000);
    m_progress->setTextVisible(false);
    m_result = named(new QLabel(this), "exportResult");
    m_result->setWordWrap(true);
    m_result->setTextInteractionFlags(Qt::TextSelectableByMouse);
    connect(m_browse, &QPushButton::clicked, this, [this] {
        const auto name = dialogs::saveFileName(this, tr("Export checkpoint"), m_output->text(),
                                                tr("Checkpoints (*.pt *.pth *.ckpt *.bin *.safetensors)"));
        if (!name.isEmpty()) {
            m_output->setText(name);
            m_outputEdited = true;
        }
    });
    connect(m_export, &QPushButton::clicked, this, &ExportPanel::startExport);
    connect(m_cancel, &QPushButton::clicked, this, [this] { m_exportJobs.requestStop(); });

    // The path a row of its own, so a narrow pane still shows it; the buttons below it with the
    // progress, a thin bar rather than an empty box while nothing is written.
    auto* outRow = new QHBoxLayout;
    outRow->addWidget(new QLabel(tr("Output:"), this));
    outRow->addWidget(m_output, 1);
    auto* buttonRow = new QHBoxLayout;
    buttonRow->addWidget(m_browse);
    buttonRow->addWidget(m_export);
    buttonRow->addWidget(m_cancel);
    buttonRow->addWidget(m_progress, 1);
    m_progress->setMaximumHeight(fontMetrics().height() / 2);

    auto* batch = new QGroupBox(tr("Batch: drop files here to convert each with these options"), this);
    batch->setObjectName(QStringLiteral("batchArea"));
    m_batchModel = new BatchModel(this);
    m_batchTable = named(new QTableView(batch), "batchTable");
    m_batchTable->setModel(m_batchModel);
    m_batchTable->verticalHeader()->hide();
    m_batchTable->horizontalHeader()->setStretchLastSection(true);
    m_batchTable->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_batchTable->setMinimumHeight(70);
    m_planTable->setMinimumHeight(150);
    auto* batchLayout = new QVBoxLayout(batch);
    batchLayout->setContentsMargins(4, 4, 4, 4);
    batchLayout->addWidget(m_batchTable);

    // The output and its Export button first: at 1366×768 the options and the plan below them
    // would push it out of the pane.
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addLayout(outRow);
    layout->addLayout(buttonRow);
    layout->addWidget(m_result);
    layout->addWidget(options);
    layout->addWidget(new QLabel(tr("Plan (nothing is written until you press Export):"), this));
    layout->addWidget(m_planTable, 3);
    layout->addWidget(m_planStatus);
    layout->addWidget(batch, 1);

    m_planTimer = new QTimer(this);
    m_planTimer->setSingleShot(true);
    m_planTimer->setInterval(kPlanDebounceMs);
    connect(m_planTimer, &QTimer::timeout, this, &ExportPanel::computePlan);
    setExporting(false);
    guardWheel(this);
}

void ExportPanel::setDocument(DocumentPtr doc)
{
    m_doc = std::move(doc);
    m_outputEdited = false;
    if (m_doc) {
        m_output->setText(defaultOutputFor(qs(m_doc->checkpoint->path)));
    }
    showChoicesOfDocument();
    schedulePlan();
}

void ExportPanel::showChoicesOfDocument()
{
    // A choice that would change nothing in this document is not offered: Dequantize FP8 where
    // there is a block-quantized FP8 weight, Drop _extra_state where there is such a value.
    const Checkpoint* c = m_doc ? m_doc->checkpoint.get() : nullptr;
    const bool fp8 = c != nullptr && !blockQuantization(*c).weights.empty();
    const bool extraState = c != nullptr && std::any_of(c->nodes.begin(), c->nodes.end(), [](const Node& n) {
                                return transform::isExtraStateKey(n.name);
                            });
    m_dequantize->setVisible(fp8);
    m_dequantizeLabel->setVisible(fp8);
    m_dropExtraState->setVisible(extraState);
    if ((!fp8 && m_options.dequantize) || (!extraState && m_options.dropExtraState)) {
        if (!fp8) {
            m_options.dequantize.reset();
        }
        if (!extraState) {
            m_options.dropExtraState = false;
        }
        optionsToFields();
    }
}

ExportPanel::Preset ExportPanel::preset() const
{
    return static_cast<Preset>(m_preset->currentData().toInt());
}

void ExportPanel::setPreset(Preset preset)
{
    m_preset->setCurrentIndex(m_preset->findData(int(preset)));
    const auto format = m_options.format;
    if (preset == SingleCard) {
        m_options = transform::singleCardPreset();
    } else if (preset == MultiCard) {
        m_options = transform::multiCardPreset();
    }
    m_options.format = format;
    optionsToFields();
    schedulePlan();
}

void ExportPanel::addFix(const transform::Options& fix)
{
    if (preset() != Custom) {
        m_options = transform::Options{};
    }
    m_options.merge(fix);
    m_preset->setCurrentIndex(m_preset->findData(int(Custom)));
    optionsToFields();
    schedulePlan();
}

void ExportPanel::addDropPath(const QString& path)
{
    fieldsToOptions();
    if (std::find(m_options.drop.begin(), m_options.drop.end(), path.toStdString()) == m_options.drop.end()) {
        m_options.drop.push_back(path.toStdString());
    }
    m_preset->setCurrentIndex(m_preset->findData(int(Custom)));
    optionsToFields();
    schedulePlan();
}

void ExportPanel::setSelectRoot(const QString& path)
{
    fieldsToOptions();
    m_options.select = path.toStdString();
    m_preset->setCurrentIndex(m_preset->findData(int(Custom)));
    optionsToFields();
    schedulePlan();
}

void ExportPanel::requestExport()
{
    if (m_export->isEnabled()) {
        m_export->click();
    }
}

void ExportPanel::optionsToFields()
{
    m_syncing = true;
    m_strip->setText(joinList(m_options.stripPrefixes));
    m_addPrefix->setText(qs(m_options.addPrefix.value_or(std::string())));
    m_mapLocation->setText(qs(m_options.mapLocation.spec()));
    m_select->setText(qs(m_options.select.value_or(std::string())));
    m_drop->setText(joinList(m_options.drop));
    m_weightsOnly->setChecked(m_options.weightsOnly);
    m_compact->setChecked(m_options.compact);
    m_unwrap->setChecked(m_options.unwrapModules);
    m_multiCard->setChecked(m_options.singleModulePrefix);
    m_dropExtraState->setChecked(m_options.dropExtraState);
    m_format->setCurrentIndex(m_options.format == transform::OutputFormat::Safetensors ? 1 : 0);
    m_dequantize->setCurrentIndex(
        std::max(0, m_dequantize->findData(int(m_options.dequantize.value_or(DType::Unknown)))));
    // A list longer than its field shows its start ("module., _orig_mod., …"), not its last
    // characters, where setText leaves the cursor; the tooltip has all of it.
    for (auto* edit : {m_strip, m_addPrefix, m_mapLocation, m_select, m_drop}) {
        edit->setCursorPosition(0);
    }
    m_syncing = false;
}

void ExportPanel::fieldsToOptions()
{
    if (m_syncing) {
        return;
    }
    transform::Options o;
    o.stripPrefixes = splitList(m_strip->text());
    if (!m_addPrefix->text().isEmpty()) {
        o.addPrefix = m_addPrefix->text().toStdString();
    }
    if (!m_select->text().trimmed().isEmpty()) {
        o.select = m_select->text().trimmed().toStdString();
    }
    o.drop = splitList(m_drop->text());
    auto map = transform::LocationMap::parse(m_mapLocation->text().trimmed().toStdString());
    if (m_mapLocation->text().trimmed().isEmpty()) {
        map = transform::LocationMap{};
    }
    if (!map) {
        m_planStatus->setText(errorHtml(qs(map.error().message)));
        m_export->setEnabled(false);
        return;
    }
    o.mapLocation = *map;
    o.weightsOnly = m_weightsOnly->isChecked();
    o.compact = m_compact->isChecked();
    o.unwrapModules = m_unwrap->isChecked();
    o.singleModulePrefix = m_multiCard->isChecked();
    o.dropExtraState = m_dropExtraState->isChecked();
    const auto oldFormat = m_options.format;
    o.format = m_format->currentIndex() == 1 ? transform::OutputFormat::Safetensors : transform::OutputFormat::Torch;
    if (const auto t = static_cast<DType>(m_dequantize->currentData().toInt()); t != DType::Unknown) {
        o.dequantize = t;
    }
    m_options = o;
    m_preset->setCurrentIndex(m_preset->findData(int(Custom)));
    if (oldFormat != o.format && m_doc && !m_outputEdited) {
        m_output->setText(defaultOutputFor(qs(m_doc->checkpoint->path)));
    }
    schedulePlan();
}

QString ExportPanel::defaultOutputFor(const QString& input) const
{
    QFileInfo info(input);
    // A URL's copy goes to the downloads folder, named after the file it was read from; a file's
    // beside it, unless its folder takes no file (the packaged sample, a read-only mount).
    if (m_doc && m_doc->remote && input == qs(m_doc->checkpoint->path)) {
        const QString name = QUrl(qs(m_doc->remote->input)).fileName();
        info =
            QFileInfo(QDir(writableFallbackFolder()).filePath(name.isEmpty() ? QStringLiteral("checkpoint.pt") : name));
    } else if (!canWriteIn(info.absolutePath())) {
        info = QFileInfo(QDir(writableFallbackFolder()).filePath(info.fileName()));
    }
    // A set's path is its folder: the one file it becomes goes beside it, named after it.
    const bool folder = info.isDir() || QFileInfo(input).isDir();
    QString ext = folder || info.suffix().isEmpty() ? QStringLiteral("pt") : info.suffix();
    if (m_options.format == transform::OutputFormat::Safetensors) {
        ext = QStringLiteral("safetensors");
    } else if (ext == QLatin1String("safetensors")) {
        ext = QStringLiteral("pt");
    }
    return info.dir().filePath((folder ? info.fileName() : info.completeBaseName()) + QStringLiteral(".fixed.") + ext);
}

void ExportPanel::schedulePlan()
{
    // What the last export wrote was written with other options: no longer what Export would write.
    if (!m_exportJobs.isRunning()) {
        m_result->clear();
    }
    if (m_doc) {
        m_planTimer->start();
    }
}

QString planSummary(Format input, transform::OutputFormat output, std::size_t steps)
{
    const bool toSafetensors = output == transform::OutputFormat::Safetensors;
    const bool converts = toSafetensors != (input == Format::Safetensors);
    const QString count = steps == 1 ? ExportPanel::tr("1 step") : ExportPanel::tr("%1 steps").arg(steps);
    if (converts) {
        const QString to = toSafetensors ? ExportPanel::tr("a safetensors file")
                                         : ExportPanel::tr("a torch.save zip (.pt) that torch.load reads");
        return steps == 0 ? ExportPanel::tr("No key changes; the file is rewritten as %1.").arg(to)
                          : ExportPanel::tr("%1, and the file is rewritten as %2.").arg(count, to);
    }
    return steps == 0 ? ExportPanel::tr("The plan changes nothing: the output would equal the input.")
                      : count + QLatin1Char('.');
}

int ExportPanel::planRowCount() const
{
    return m_planModel->rowCount();
}

void ExportPanel::computePlan()
{
    if (!m_doc) {
        return;
    }
    m_planStatus->setText(tr("Planning…"));
    struct Planned {
        PlanModel::Steps steps;
        std::vector<std::string> stripsUsed;  // Plan::stripPrefixesUsed
    };
    m_planJobs.start(
        [doc = m_doc, opts = m_options](std::stop_token, const ProgressFn&) -> Expected<Planned> {
            auto plan = transform::makePlan(*doc->checkpoint, opts);
            if (!plan) {
                return plan.error();
            }
            return Planned{std::make_shared<std::vector<transform::PlanStep>>(std::move(plan->steps)),
                           std::move(plan->stripPrefixesUsed)};
        },
        [this, strips = m_options.stripPrefixes](Expected<Planned> planned) {
            if (!planned) {
                m_planModel->setSteps({});
                m_planStatus->setText(errorHtml(qs(planned.error().message)));
                m_export->setEnabled(false);
            } else {
                // A preset strips every wrapper prefix there is; the field shows those this document's
                // keys carry, which plan the same (Plan::stripPrefixesUsed), not every combination.
                if (preset() != Custom && strips == m_options.stripPrefixes && planned->stripsUsed != strips) {
                    m_options.stripPrefixes = planned->stripsUsed;
                    optionsToFields();
                }
                const auto& steps = planned->steps;
                m_planModel->setSteps(steps);
                fitPlanRows();
                m_planStatus->setText(planSummary(m_doc->checkpoint->format, m_options.format, steps->size()));
                if (const auto& cut = m_doc->checkpoint->truncation; cut.salvaged) {
                    m_planStatus->setText(
                        errorHtml(tr("This file is cut off (it ends %1): Export does not write what survived. "
                                     "`ckptscope convert FILE -o OUT --salvage` does, and lists every tensor it loses.")
                                      .arg(qs(cut.endsIn))));
                }
                setExporting(m_exportJobs.isRunning());
            }
            Q_EMIT planReady();
        });
}

bool ExportPanel::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == m_planViewport && event->type() == QEvent::Resize) {
        fitPlanColumns();
    }
    return QWidget::eventFilter(watched, event);
}

void ExportPanel::fitPlanColumns()
{
    auto* header = m_planTable->horizontalHeader();
    const int width = m_planTable->viewport()->width() - header->sectionSize(PlanModel::Step);
    if (width <= 0) {
        return;
    }
    // Hundredths of the width: paths in Key (they wrap at '/'), the old and new names (which do
    // not wrap, so they get enough for a typical key), and Detail the rest. Detail is sized here,
    // not stretched by the header later, so the rows are fitted to the width it ends up with.
    const int key = width * 27 / 100;
    const int names = width * 23 / 100;
    header->resizeSection(PlanModel::Key, key);
    header->resizeSection(PlanModel::Before, names);
    header->resizeSection(PlanModel::After, names);
    header->resizeSection(PlanModel::Detail, width - key - 2 * names);
    fitPlanRows();
}

void ExportPanel::fitPlanRows()
{
    // Measuring every row's wrapped height is linear in the rows: a plan of tens of thousands of
    // renames keeps one line a row (each cell's tooltip has its whole text).
    constexpr int kMaxFitted = 2000;
    if (m_planModel->rowCount() <= kMaxFitted) {
        m_planTable->resizeRowsToContents();
    }
}

void ExportPanel::setExporting(bool busy)
{
    // A salvaged archive (truncated-archive) is exported only by `convert --salvage`, which names
    // every lost tensor.
    const bool canExport = !busy && m_doc && !m_doc->checkpoint->truncation.salvaged;
    // The button being disabled hands the focus on first: to its neighbour (Export to Cancel and
    // back). Left to Qt, the focus went to the next field in the chain, the plan, and the scroll
    // area scrolled to it: the result line went out of view and a click aimed at Cancel landed on
    // a plan row.
    QPushButton* const losing = busy ? m_export : m_cancel;
    QPushButton* const gaining = busy ? m_cancel : m_export;
    gaining->setEnabled(busy || canExport);
    if (losing->hasFocus() && gaining->isEnabled()) {
        gaining->setFocus(Qt::OtherFocusReason);
    }
    losing->setEnabled(false);
    m_browse->setEnabled(!busy);
}

void ExportPanel::revealResult()
{
    for (QWidget* w = parentWidget(); w != nullptr; w = w->parentWidget()) {
        if (auto* area = qobject_cast<QScrollArea*>(w)) {
            // The output, its buttons and the result head the panel: shown together.
            area->ensureVisible(0, 0, 0, 0);
            area->ensureWidgetVisible(m_result, 0, 0);
            return;
        }
    }
}

void ExportPanel::startExport()
{
    if (!m_doc || m_output->text().trimmed().isEmpty()) {
        return;
    }
    // A name that says the other format (llama.pt for a safetensors file) makes a file its readers
    // refuse while `check` calls it fine: renamed, kept on purpose, or not written.
    const bool safetensors = m_options.format == transform::OutputFormat::Safetensors;
    if (const auto clash = write::extensionMismatch(m_output->text().trimmed().toStdString(), safetensors)) {
        const QString agreeing = QFileInfo(qs(clash->agreeing)).fileName();
        const int answer = dialogs::choose(
            this, tr("Name and format disagree"),
            tr("%1.\n\nRename the output to %2?").arg(qs(clash->message), agreeing),
            {tr("Rename to %1").arg(agreeing), tr("Keep %1").arg(QFileInfo(m_output->text().trimmed()).fileName())});
        if (answer < 0) {
            m_result->setText(tr("Not written: the name and the format disagree."));
            return;
        }
        if (answer == 0) {
            m_output->setText(qs(clash->agreeing));
            m_outputEdited = true;
        }
    }
    const auto out = m_output->text().trimmed().toStdString();
    // The save dialog asks before replacing a file; a typed path must too.
    if (const QFileInfo target(qs(out));
        target.exists() &&
        !dialogs::confirm(this, tr("Replace file?"),
                          tr("%1 already exists. Replace it with the exported copy?").arg(target.absoluteFilePath()))) {
        m_result->setText(tr("Not written: %1 exists.").arg(qs(out).toHtmlEscaped()));
        return;
    }
    m_result->setText(tr("Writing %1…").arg(qs(out)));
    m_progress->setValue(0);
    setExporting(true);
    m_exportJobs.start(
        [doc = m_doc, opts = m_options, out](std::stop_token stop,
                                             const ProgressFn& progress) -> Expected<write::WriteResult> {
            auto plan = transform::makePlan(*doc->checkpoint, opts);
            if (!plan) {
                return plan.error();
            }
            BusyText busy("Writing " + out);
            return write::writeCheckpoint(
                *doc->checkpoint, *plan, out,
                [&progress, &busy](const write::WriteProgress& p) {
                    if (auto text = busy.due(p.bytesDone, p.bytesTotal)) {
                        progress(p.bytesTotal ? static_cast<double>(p.bytesDone) / static_cast<double>(p.bytesTotal)
                                              : 0.0,
                                 *text);
                    }
                },
                stop, kDurable);
        },
        [this](Expected<write::WriteResult> r) {
            setExporting(false);
            if (!r) {
                m_progress->setValue(0);
                const auto msg = qs(r.error().describe());
                m_result->setText(errorHtml(msg));
                revealResult();
                Q_EMIT exportFinished(false, msg);
                return;
            }
            m_progress->setValue(1000);
            QString text = tr("Wrote <b>%1</b> (%2).").arg(qs(r->path).toHtmlEscaped(), humanSize(r->bytes));
            for (const auto& note : r->notes) {
                text += QStringLiteral("<br><span style='color:gray'>%1</span>").arg(qs(note).toHtmlEscaped());
            }
            m_result->setText(text);
            revealResult();
            Q_EMIT exportFinished(true, qs(r->path));
        });
}

void ExportPanel::dragEnterEvent(QDragEnterEvent* event)
{
    if (!localFiles(event->mimeData()).isEmpty()) {
        event->acceptProposedAction();
    }
}

void ExportPanel::dropEvent(QDropEvent* event)
{
    const auto files = localFiles(event->mimeData());
    if (files.isEmpty()) {
        return;
    }
    event->acceptProposedAction();
    queueBatch(files);
}

void ExportPanel::queueBatch(const QStringList& files)
{
    for (const auto& f : files) {
        m_batchModel->enqueue(f, defaultOutputFor(f));
    }
    if (!m_batchJobs.isRunning()) {
        startNextBatch();
    }
}

void ExportPanel::startNextBatch()
{
    const int row = m_batchModel->startNext();
    if (row < 0) {
        Q_EMIT batchFinished();
        return;
    }
    const auto in = m_batchModel->input(row).toStdString();
    const auto out = m_batchModel->output(row).toStdString();
    m_batchJobs.start(
        [in, out, opts = m_options](std::stop_token stop, const ProgressFn&) -> Expected<write::WriteResult> {
            auto ck = openCheckpoint(in);
            if (!ck) {
                return ck.error();
            }
            auto plan = transform::makePlan(**ck, opts);
            if (!plan) {
                return plan.error();
            }
            return write::writeCheckpoint(**ck, *plan, out, {}, stop, kDurable);
        },
        [this, row](const Expected<write::WriteResult>& r) {
            m_batchModel->finish(row, r);
            startNextBatch();
        });
}

}  // namespace ckpt::ui
