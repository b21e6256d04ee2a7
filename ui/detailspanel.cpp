#include "detailspanel.h"

#include "checkpoint/block_quant.h"
#include "checkpoint/layout.h"
#include "diagnose/values.h"
#include "histogramwidget.h"
#include "text.h"

#include <QLabel>
#include <QPushButton>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace ckpt::ui {
namespace {

QString row(const QString& label, const QString& value)
{
    return QStringLiteral("<tr><td style='padding-right:12px'><b>%1</b></td><td>%2</td></tr>")
        .arg(label.toHtmlEscaped(), value.toHtmlEscaped());
}

QString table(const QString& rows)
{
    return QStringLiteral("<table cellspacing='2'>%1</table>").arg(rows);
}

constexpr std::size_t kMaxSharers = 12;

}  // namespace

DetailsPanel::DetailsPanel(QWidget* parent)
    : QWidget(parent), m_text(new QTextBrowser(this)), m_statsButton(new QPushButton(tr("Compute statistics"), this)),
      m_statsLabel(new QLabel(this)), m_histogram(new HistogramWidget(this)), m_preview(new QLabel(this))
{
    setObjectName(QStringLiteral("detailsPanel"));
    m_text->setObjectName(QStringLiteral("detailsText"));
    m_text->setOpenLinks(false);
    m_text->setFrameShape(QFrame::NoFrame);
    m_statsButton->setObjectName(QStringLiteral("statsButton"));
    m_statsButton->setToolTip(tr("Read this tensor's values and compute min, max, mean, std, NaN/Inf and a histogram"));
    m_statsLabel->setObjectName(QStringLiteral("statsLabel"));
    m_statsLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_statsLabel->setWordWrap(true);
    m_histogram->setObjectName(QStringLiteral("histogram"));
    m_preview->setObjectName(QStringLiteral("valuePreview"));
    m_preview->setWordWrap(true);
    m_preview->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_preview->setFont(QFont(QStringLiteral("monospace")));

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_text, 1);
    layout->addWidget(m_statsButton, 0, Qt::AlignLeft);
    layout->addWidget(m_statsLabel);
    layout->addWidget(m_histogram);
    layout->addWidget(m_preview);
    connect(m_statsButton, &QPushButton::clicked, this, &DetailsPanel::computeStatistics);
    clearNode();
}

void DetailsPanel::setDocument(DocumentPtr doc)
{
    m_doc = std::move(doc);
    clearNode();
}

void DetailsPanel::clearNode()
{
    m_jobs.requestStop();
    m_node = NodeIndex();
    m_text->setHtml(QStringLiteral("<p style='color:gray'>%1</p>").arg(tr("Select a key to see its details.")));
    m_statsButton->hide();
    m_statsLabel->clear();
    m_statsLabel->hide();
    m_histogram->clear();
    m_histogram->hide();
    m_preview->clear();
    m_preview->hide();
}

QString DetailsPanel::text() const
{
    return m_text->toPlainText() + QLatin1Char('\n') + m_statsLabel->text() + QLatin1Char('\n') + m_preview->text();
}

void DetailsPanel::showNode(NodeIndex node)
{
    clearNode();
    if (!m_doc || !m_doc->checkpoint->nodes.contains(node)) {
        return;
    }
    m_node = node;
    const auto& ck = *m_doc->checkpoint;
    const auto& n = ck.nodes[node];
    // The root has no key path; it is named as its row is.
    const QString title = node == kRootNode ? tr("(root)") : qs(ck.pathOf(node));
    QString html = QStringLiteral("<h3 style='margin:0'>%1</h3>").arg(title.toHtmlEscaped());
    if (n.kind == NodeKind::Tensor && n.tensor.valid()) {
        html += tensorHtml(ck.tensors[n.tensor]);
        m_statsButton->show();
        m_statsButton->setEnabled(ck.tensors[n.tensor].storage.valid());
    } else if (n.object.valid()) {
        html += objectHtml(n);
    } else {
        html += containerHtml(node);
    }
    m_text->setHtml(html);
}

QString DetailsPanel::tensorHtml(const TensorEntry& t) const
{
    const auto& ck = *m_doc->checkpoint;
    QString rows;
    rows += row(tr("Kind"), t.isParameter ? tr("nn.Parameter") : tr("tensor"));
    rows += row(tr("dtype"), qs(dtypeName(t.dtype)));
    rows += row(tr("Shape"), qs(tensorShapeText(ck, t)));
    if (t.form == pickle::TensorForm::Nested) {
        rows += row(tr("Layout"), tr("nested (torch.nested): its components are views of one buffer of %1 values, "
                                     "the elements and bytes below")
                                      .arg(t.numel));
    } else {
        rows += row(tr("Stride"), shapeText(t.stride) + (t.contiguous ? tr(" (contiguous)") : tr(" (not contiguous)")));
    }
    if (const auto q = quantizerOf(ck, t)) {
        rows += row(tr("Quantizer"), qs(q->scheme) + QStringLiteral(": ") + qs(q->summary()));
    }
    // Block-quantized FP8 (checkpoint/block_quant.h): the weight's scale and block, or whose scale it is.
    const BlockQuantization blocks = blockQuantization(ck);
    const TensorIndex self = ck.nodes[t.node].tensor;
    if (const auto* b = blocks.ofWeight(self)) {
        rows += row(b->ok() ? tr("FP8 blocks") : tr("FP8 blocks (broken)"), qs(blockScaleText(ck, *b)));
    } else if (const auto* s = blocks.ofScale(self)) {
        rows += row(tr("Scale of"), qs(ck.tensors[s->weight].path));
    }
    for (const auto& tied : ck.ties.restored) {
        if (tied.name == t.path.view()) {
            rows += row(tr("Tied to"), tr("%1: not stored in the file; %2 ties it (%3), as model.state_dict() "
                                          "has it")
                                           .arg(qs(tied.source), qs(ck.ties.architecture), qs(ck.ties.decidedBy)));
        }
    }
    for (const auto& part : sparseParts(ck, t)) {
        rows += row(qs(part.name), qs(dtypeName(part.dtype)) + QLatin1Char(' ') + shapeText(part.shape));
    }
    rows += row(tr("Elements"), QString::number(t.numel));
    if (t.hasData()) {
        rows += row(tr("Bytes"), QStringLiteral("%1 (%2)").arg(humanSize(t.nbytes)).arg(t.nbytes));
    } else {
        rows +=
            row(tr("Bytes"),
                tr("no data: a meta tensor (saved from the meta device); it would take %1").arg(humanSize(t.nbytes)));
    }
    rows += row(tr("Saved on"), qs(t.location));
    // A set's tensor: the file(s) of the set its bytes are read from.
    if (m_doc->set) {
        if (const auto it = m_doc->set->storedIn.find(std::string(t.path.view()));
            it != m_doc->set->storedIn.end() && !it->second.empty()) {
            rows += row(tr("Stored in"), qs(it->second));
        }
    }
    if (t.requiresGrad) {
        rows += row(tr("requires_grad"), tr("yes"));
    }
    if (ck.storages.contains(t.storage)) {
        const auto& s = ck.storages[t.storage];
        rows += row(tr("Storage"), tr("key %1, %2 of %3").arg(qs(s.key), humanSize(s.nbytes), qs(dtypeName(s.dtype))));
        rows += row(tr("Storage offset"), tr("%1 elements").arg(t.storageOffset));
        if (!s.record.empty()) {
            rows += row(tr("Record"), tr("%1 at byte %2").arg(qs(s.record)).arg(s.fileOffset));
        }
        if (!s.present) {
            rows +=
                row(tr("Missing"), tr("the file holds %1 of %2").arg(humanSize(s.storedBytes), humanSize(s.nbytes)));
        }
        const auto& sharers = m_doc->storageTensors[t.storage.value()];
        QStringList others;
        for (auto other : sharers) {
            if (ck.tensors[other].path != t.path && static_cast<std::size_t>(others.size()) < kMaxSharers) {
                others << qs(ck.tensors[other].path);
            }
        }
        if (!others.isEmpty()) {
            QString text = others.join(QStringLiteral(", "));
            if (sharers.size() - 1 > kMaxSharers) {
                text += tr(" and %1 more").arg(sharers.size() - 1 - kMaxSharers);
            }
            rows += row(tr("Shares storage with"), text);
        }
    } else {
        rows += row(tr("Storage"), tr("none (%1 form)").arg(qs(t.location)));
    }
    return table(rows);
}

QString DetailsPanel::objectHtml(const Node& n) const
{
    const auto& ck = *m_doc->checkpoint;
    const auto& o = ck.objects[n.object];
    QString rows;
    rows += row(tr("Type"), qs(o.type));
    rows += row(tr("Kind"), o.isModule ? tr("pickled nn.Module (needs its class to load)") : tr("object"));
    if (ck.arena[n.value].kind == pickle::Kind::Object) {
        const auto& info = pickle::objectOf(ck.arena, n.value);
        if (info.args.valid() && !ck.arena[info.args].items.empty()) {
            rows += row(tr("Arguments"), qs(pickle::shortRepr(ck.arena, info.args, 300)));
        }
        if (info.state.valid()) {
            rows += row(tr("State"), qs(pickle::shortRepr(ck.arena, info.state, 600)));
        }
    }
    rows += row(tr("Tensors inside"), QStringLiteral("%1 (%2)").arg(n.tensorCount).arg(humanSize(n.bytes)));
    return table(rows);
}

QString DetailsPanel::containerHtml(NodeIndex node) const
{
    const auto& ck = *m_doc->checkpoint;
    const auto& n = ck.nodes[node];
    QString rows;
    QString kind = qs(nodeKindName(n.kind));
    if (n.stateDictLike) {
        kind += tr(" (looks like a state dict)");
    }
    rows += row(tr("Kind"), kind);
    if (n.kind == NodeKind::Scalar) {
        rows += row(tr("Value"), qs(pickle::shortRepr(ck.arena, n.value, 2000)));
    } else {
        rows += row(tr("Items"), QString::number(n.childCount));
        rows += row(tr("Tensors inside"), QStringLiteral("%1 (%2)").arg(n.tensorCount).arg(humanSize(n.bytes)));
    }
    return table(rows);
}

void DetailsPanel::computeStatistics()
{
    if (!m_doc || !m_node.valid()) {
        return;
    }
    const auto tensor = m_doc->checkpoint->nodes[m_node].tensor;
    auto doc = m_doc;
    m_statsButton->setEnabled(false);
    m_statsLabel->setText(tr("Reading values…"));
    m_statsLabel->show();
    m_jobs.start([doc, tensor](std::stop_token stop,
                               const ProgressFn&) { return diagnose::tensorStats(*doc->checkpoint, tensor, {}, stop); },
                 [this](auto result) {
                     m_statsButton->setEnabled(true);
                     if (!result) {
                         m_statsLabel->setText(qs(result.error().describe()));
                         Q_EMIT statisticsReady();
                         return;
                     }
                     showStatistics(*result);
                     Q_EMIT statisticsReady();
                 });
}

void DetailsPanel::showStatistics(const diagnose::TensorStats& s)
{
    QString text = tr("<b>min</b> %1 &nbsp; <b>max</b> %2 &nbsp; <b>mean</b> %3 &nbsp; <b>std</b> %4")
                       .arg(s.min, 0, 'g', 6)
                       .arg(s.max, 0, 'g', 6)
                       .arg(s.mean, 0, 'g', 6)
                       .arg(s.std, 0, 'g', 6);
    const QString nonFinite =
        tr("NaN %1, +Inf %2, -Inf %3").arg(s.nan).arg(s.inf - std::min(s.inf, s.negInf)).arg(s.negInf);
    text += QStringLiteral("<br>") + (s.nan + s.inf > 0 ? errorHtml(nonFinite) : nonFinite);
    m_statsLabel->setText(text);
    m_statsLabel->show();
    if (!s.histogram.empty() && s.finite > 0) {
        m_histogram->setHistogram(s.histogram, s.histLow, s.histHigh);
        m_histogram->show();
    }
    m_preview->setText(qs(s.preview));
    m_preview->setVisible(!s.preview.empty());
}

}  // namespace ckpt::ui
