#include "testloadpanel.h"

#include "busytext.h"
#include "device/ddp_replay.h"
#include "device/nvml.h"
#include "device/sampler.h"
#include "device/testload.h"
#include "memorychart.h"
#include "text.h"
#include "wheelguard.h"

#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QVBoxLayout>

#include <algorithm>
#include <optional>

namespace ckpt::ui {
namespace {

// A sampler of the panel's own feeds the live chart while work runs; the result's timeline
// replaces it at the end.
device::Sampler::Options liveChartFeed(const QPointer<TestLoadPanel>& self, QObject* target)
{
    device::Sampler::Options opts;
    opts.interval = std::chrono::milliseconds(50);
    opts.onSample = [self, target](const device::Sample& s) {
        QMetaObject::invokeMethod(
            target,
            [self, s] {
                if (self) {
                    self->chart()->addSample(s);
                }
            },
            Qt::QueuedConnection);
    };
    return opts;
}

}  // namespace

QString gpuNoteText(const device::Inventory& inv)
{
    if (!inv.driverVersion.empty()) {
        return TestLoadPanel::tr("NVIDIA driver %1, %n GPU(s)", nullptr, inv.gpuCount()).arg(qs(inv.driverVersion));
    }
    if (inv.gpuCount() > 0) {
        return TestLoadPanel::tr("%n GPU(s)", nullptr, inv.gpuCount());
    }
    // NVML's loader says "cannot open shared object file": to a user that means no driver.
    if (inv.gpuNote.find("NVML not available") != std::string::npos ||
        inv.gpuNote.find("cannot open shared object") != std::string::npos) {
        return TestLoadPanel::tr("No NVIDIA driver found: only the CPU can be tested, and GPUs are not watched.");
    }
    return inv.gpuNote.empty() ? TestLoadPanel::tr("No GPU found.") : qs(inv.gpuNote);
}

// The CPU column's highest resident set of ckptscope's processes over the run (the helper with
// LibTorch loaded, and the tensors), or 0 without a CPU column.
std::uint64_t processPeak(const device::Timeline& timeline)
{
    const int cpu = timeline.column("cpu");
    std::uint64_t peak = 0;
    for (const auto& s : timeline.samples) {
        if (cpu >= 0 && static_cast<std::size_t>(cpu) < s.ownBytes.size()) {
            peak = std::max(peak, s.ownBytes[static_cast<std::size_t>(cpu)]);
        }
    }
    return peak;
}

// The level the CPU line rises from when the helper reports what the tensors added (rss-anon):
// its peak less that, so the chart plots the tensors, not LibTorch's own start-up (163 MiB for a
// 65 KiB file). Empty otherwise: the line rises from its first sample.
std::optional<std::uint64_t> cpuFloorFor(const device::TestloadReport& r)
{
    const std::uint64_t peak = processPeak(r.timeline);
    if (r.peakSource != "rss-anon" || peak == 0) {
        return std::nullopt;
    }
    return peak > r.peakBytes ? peak - r.peakBytes : 0;
}

QString peakText(const device::TestloadReport& r)
{
    const auto peak = humanSize(r.peakBytes);
    if (r.peakSource == "rss-anon") {
        // The chart plots what the tensors added; the process's whole resident set (LibTorch
        // itself included) is named here only.
        return TestLoadPanel::tr("the tensors added %1 of anonymous memory (the chart); ckptscope's processes held %2 "
                                 "in all at their peak")
            .arg(peak, humanSize(processPeak(r.timeline)));
    }
    if (r.peakSource == "nvml-process") {
        return TestLoadPanel::tr("peak %1 on the device (NVML)").arg(peak);
    }
    QString text = TestLoadPanel::tr("peak %1 (%2)").arg(peak, qs(r.peakSource));
    if (!r.peakNote.empty()) {
        text += QStringLiteral(" <span style='color:gray'>%1</span>").arg(qs(r.peakNote).toHtmlEscaped());
    }
    return text;
}

QString otherGpusText(const device::TestloadReport& r)
{
    QString other;
    if (r.timeline.devices.size() <= 1) {
        // Without NVML the sampler sees no GPU at all: nothing was watched, so nothing is claimed.
        other = TestLoadPanel::tr("other GPUs not watched (no NVIDIA driver found)");
    } else if (!r.otherDevicesTouched) {
        other = TestLoadPanel::tr("no other GPU was touched by this load");
    } else {
        QStringList moved;
        for (const auto& d : r.otherDevices) {
            if (d.by == "this load") {
                moved << TestLoadPanel::tr("%1 (+%2)").arg(qs(d.device), humanSize(d.riseBytes));
            }
        }
        other = errorHtml(
            TestLoadPanel::tr("this load put memory on other GPUs: %1").arg(moved.join(QStringLiteral(", "))));
    }
    // Another job's allocation on a shared node is named as such, never blamed on the load.
    if (!r.otherDevicesDoubt.empty()) {
        other += QStringLiteral(" (") + qs(r.otherDevicesDoubt).toHtmlEscaped() + QStringLiteral(")");
    }
    return other;
}

TestLoadPanel::TestLoadPanel(QWidget* parent)
    : QWidget(parent), m_device(new QComboBox(this)), m_refresh(new QPushButton(tr("Refresh"), this)),
      m_load(new QPushButton(tr("Load"), this)), m_cancel(new QPushButton(tr("Cancel"), this)),
      m_ranks(new QSpinBox(this)), m_mapLocation(new QComboBox(this)),
      m_replay(new QPushButton(tr("Simulate DDP ranks"), this)), m_progress(new QProgressBar(this)),
      m_note(new QLabel(this)), m_chart(new MemoryChart(this)), m_summary(new QLabel(this))
{
    setObjectName(QStringLiteral("testLoadPanel"));
    m_device->setObjectName(QStringLiteral("deviceCombo"));
    m_device->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_device->setMinimumContentsLength(10);
    m_device->setToolTip(
        tr("The device to load on: each GPU with its free memory, or the CPU"));  // long GPU names are cut, not the
                                                                                  // panel widened
    m_refresh->setObjectName(QStringLiteral("refreshDevicesButton"));
    m_load->setObjectName(QStringLiteral("loadButton"));
    m_load->setToolTip(tr("Load every tensor onto the chosen device (Ctrl+L): a GPU through the NVIDIA driver, the "
                          "CPU through LibTorch, each in a process of its own"));
    m_ranks->setObjectName(QStringLiteral("ddpRanksSpin"));
    m_ranks->setRange(1, 64);
    m_ranks->setValue(4);
    m_ranks->setSuffix(tr(" ranks"));
    m_mapLocation->setObjectName(QStringLiteral("ddpMapLocationCombo"));
    m_mapLocation->addItem(tr("no map_location"), QString());
    m_mapLocation->addItem(QStringLiteral("map_location='cpu'"), QStringLiteral("cpu"));
    m_replay->setObjectName(QStringLiteral("ddpReplayButton"));
    // Run > Simulate DDP Ranks holds the shortcut (Ctrl+Shift+L): a second one here would make it
    // ambiguous, and neither would fire.
    m_replay->setToolTip(
        tr("(Ctrl+Shift+L) Start that many ranks, each with a context on its own GPU, and put every storage where "
           "torch.load would: without map_location, on the device it was saved from (GPU 0 piles "
           "up). Needs an NVIDIA GPU."));
    m_cancel->setObjectName(QStringLiteral("cancelLoadButton"));
    m_progress->setObjectName(QStringLiteral("loadProgress"));
    m_progress->setRange(0, 1000);
    m_progress->setValue(0);
    m_progress->setTextVisible(false);
    m_note->setObjectName(QStringLiteral("deviceNote"));
    m_note->setWordWrap(true);
    m_note->setStyleSheet(QStringLiteral("color: gray"));
    m_summary->setObjectName(QStringLiteral("loadSummary"));
    m_summary->setWordWrap(true);
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);

    // Two rows, so the panel fits a narrow side pane: a load, then the DDP replay.
    auto* controls = new QHBoxLayout;
    controls->addWidget(m_device, 1);
    controls->addWidget(m_refresh);
    controls->addWidget(m_load);
    controls->addWidget(m_cancel);
    auto* replay = new QHBoxLayout;
    replay->addWidget(m_ranks);
    replay->addWidget(m_mapLocation);
    replay->addWidget(m_replay);
    replay->addStretch(1);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addLayout(controls);
    layout->addLayout(replay);
    layout->addWidget(m_note);
    layout->addWidget(m_progress);
    // The summary above the chart: the chart takes what is left, so at 1366×768 the result is in
    // view, not below the fold.
    layout->addWidget(m_summary);
    layout->addWidget(m_chart, 1);

    guardWheel(this);
    connect(m_refresh, &QPushButton::clicked, this, &TestLoadPanel::refreshDevices);
    connect(m_load, &QPushButton::clicked, this, &TestLoadPanel::startLoad);
    connect(m_replay, &QPushButton::clicked, this, &TestLoadPanel::startReplay);
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        m_loadJobs.requestStop();
        m_summary->setText(tr("Cancelling…"));
    });
    m_loadJobs.setProgressHandler([this](double fraction, const QString& text) {
        m_progress->setValue(static_cast<int>(fraction * 1000));
        if (!text.isEmpty()) {
            m_summary->setText(text);
        }
    });
    setBusy(false);
}

void TestLoadPanel::setDocument(DocumentPtr doc)
{
    m_doc = std::move(doc);
    if (!m_devicesQueried) {
        refreshDevices();
    }
}

void TestLoadPanel::requestLoad()
{
    if (m_load->isEnabled()) {
        m_load->click();
    }
}

void TestLoadPanel::requestReplay()
{
    if (m_replay->isEnabled()) {
        m_replay->click();
    }
}

bool TestLoadPanel::offersReplay() const
{
    // The replay needs a GPU: the combo lists the CPU first, then each GPU.
    return m_device->count() > 1;
}

void TestLoadPanel::setBusy(bool busy)
{
    m_load->setEnabled(!busy && m_device->count() > 0);
    // The ranks and their map_location are the replay's: offered with it, or not at all.
    for (QWidget* replay : std::initializer_list<QWidget*>{m_replay, m_ranks, m_mapLocation}) {
        replay->setEnabled(!busy && offersReplay());
    }
    m_cancel->setEnabled(busy);
    m_device->setEnabled(!busy);
    m_refresh->setEnabled(!busy);
}

void TestLoadPanel::refreshDevices()
{
    m_devicesQueried = true;
    m_note->setText(tr("Looking for GPUs…"));
    // NVML is loaded once (dlopen + init can take a moment) and kept for the sampler.
    struct Result {
        std::shared_ptr<const device::Nvml> nvml;
        device::Inventory inventory;
    };
    auto nvml = m_nvml;
    m_inventoryJobs.start(
        [nvml](std::stop_token, const ProgressFn&) mutable {
            Result r;
            if (!nvml) {
                if (auto loaded = device::Nvml::load()) {
                    nvml = *loaded;
                }
            }
            r.nvml = nvml;
            r.inventory = device::queryInventory(nvml);
            return r;
        },
        [this](const Result& r) {
            m_nvml = r.nvml;
            showInventory(r.inventory);
            Q_EMIT devicesReady();
        });
}

void TestLoadPanel::showInventory(const device::Inventory& inv)
{
    const auto previous = m_device->currentData().toString();
    m_device->clear();
    // Each GPU under the name torch gives it here (cuda:N in CUDA's order, CUDA_VISIBLE_DEVICES
    // applied); one CUDA does not see from this process is listed, disabled, as nvml:I.
    auto* items = qobject_cast<QStandardItemModel*>(m_device->model());
    int pick = 0;
    for (const auto& d : inv.devices) {
        const auto free = d.totalBytes > d.usedBytes ? d.totalBytes - d.usedBytes : 0;
        const bool cpu = d.id == "cpu";
        const bool loadable = cpu || d.cudaOrdinal >= 0;
        QString label =
            cpu ? tr("CPU (%1 free of %2)").arg(humanSize(free), humanSize(d.totalBytes))
                : tr("%1 — %2 (%3 free of %4)").arg(qs(d.id), qs(d.name), humanSize(free), humanSize(d.totalBytes));
        if (!loadable) {
            label += tr(" — not visible to CUDA here");
        }
        m_device->addItem(label, qs(d.id));
        const int row = m_device->count() - 1;
        m_device->setItemData(row, qs(d.uuid.empty() ? d.id : d.id + " " + d.uuid), Qt::ToolTipRole);
        if (items && !loadable) {
            items->item(row)->setEnabled(false);
        }
        // Default to the first loadable GPU: that is where users mean to load.
        if (pick == 0 && !cpu && loadable) {
            pick = row;
        }
    }
    if (const int prev = m_device->findData(previous); prev >= 0 && (!items || items->item(prev)->isEnabled())) {
        pick = prev;
    }
    m_device->setCurrentIndex(pick);
    m_note->setText(gpuNoteText(inv));
    m_note->setToolTip(qs(inv.gpuNote));  // the loader's own words, for a bug report
    setBusy(false);
}

template <class Report>
void TestLoadPanel::finishRun(const Expected<Report>& result, void (TestLoadPanel::*showResult)(const Report&))
{
    setBusy(false);
    if (!result) {
        m_progress->setValue(0);
        m_summary->setText(errorHtml(qs(result.error().describe())));
        Q_EMIT loadFinished(false);
        return;
    }
    (this->*showResult)(*result);
    Q_EMIT loadFinished(true);
}

void TestLoadPanel::startLoad()
{
    if (!m_doc || m_device->count() == 0) {
        return;
    }
    const auto deviceId = m_device->currentData().toString().toStdString();
    auto nvml = m_nvml;
    prepareChart(deviceId);
    m_progress->setValue(0);
    m_summary->setText(tr("Starting the test-load engine…"));
    setBusy(true);

    device::TestloadRequest request;
    request.path = m_doc->checkpoint->path;
    request.set = m_doc->set != nullptr;  // the engine reads the set in place, as the window does
    request.device = deviceId;
    QPointer<TestLoadPanel> self(this);
    m_loadJobs.start(
        [request, nvml, self, target = static_cast<QObject*>(this)](std::stop_token stop, const ProgressFn& progress) {
            device::Sampler sampler(nvml);
            sampler.start(liveChartFeed(self, target));
            // The helper's memory belongs on the live CPU curve from its start, as it does in the
            // report's timeline that replaces the curve at the end.
            auto tracked = request;
            tracked.onHelperStarted = [&sampler](pid_t pid) { sampler.trackPid(pid); };
            BusyText busy("Loading onto " + request.device);
            auto report = device::testLoad(
                tracked,
                [&progress, &busy](const device::TestloadProgress& p) {
                    if (auto text = busy.due(p.bytes, p.totalBytes, std::to_string(p.tensors) + " tensors")) {
                        progress(p.totalBytes > 0 ? static_cast<double>(p.bytes) / static_cast<double>(p.totalBytes)
                                                  : 0.0,
                                 *text);
                    }
                },
                stop, nvml);
            sampler.stop();
            return report;
        },
        [this](const Expected<device::TestloadReport>& result) { finishRun(result, &TestLoadPanel::showReport); });
}

void TestLoadPanel::prepareChart(const std::string& highlight)
{
    // Chart columns as the sampler lays them out: the CPU, then each GPU.
    std::vector<std::string> ids;
    QStringList labels;
    for (int i = 0; i < m_device->count(); ++i) {
        ids.push_back(m_device->itemData(i).toString().toStdString());
        labels << m_device->itemData(i).toString();
    }
    m_chart->reset(ids, labels, qs(highlight));
}

void TestLoadPanel::startReplay()
{
    if (!m_doc || m_device->count() < 2) {
        return;
    }
    auto nvml = m_nvml;
    prepareChart("cuda:0");
    m_progress->setValue(0);
    const int ranks = m_ranks->value();
    m_summary->setText(tr("Starting %n rank(s)…", nullptr, ranks));
    setBusy(true);
    device::ReplayRequest request;
    request.path = m_doc->checkpoint->path;
    request.set = m_doc->set != nullptr;
    request.ranks = ranks;
    request.mapLocation = m_mapLocation->currentData().toString().toStdString();
    request.hold = std::chrono::milliseconds(1500);  // long enough to see the plateau on the chart
    QPointer<TestLoadPanel> self(this);
    m_loadJobs.start(
        [request, nvml, self, target = static_cast<QObject*>(this)](std::stop_token stop, const ProgressFn& progress) {
            device::Sampler sampler(nvml);
            sampler.start(liveChartFeed(self, target));
            auto report = device::ddpReplay(
                request,
                [&progress, ranks = request.ranks](int loaded) {
                    progress(static_cast<double>(loaded) / ranks,
                             QObject::tr("%1 of %2 ranks loaded").arg(loaded).arg(ranks));
                },
                stop, nvml);
            sampler.stop();
            return report;
        },
        [this](const Expected<device::ReplayReport>& result) { finishRun(result, &TestLoadPanel::showReplay); });
}

// The finished run's own samples replace the live ones; progress shows complete.
void TestLoadPanel::showTimeline(const device::Timeline& timeline, const QString& highlight,
                                 std::optional<std::uint64_t> cpuFloor)
{
    m_progress->setValue(1000);
    if (timeline.samples.empty()) {
        return;
    }
    QStringList labels;
    for (const auto& id : timeline.devices) {
        labels << qs(id);
    }
    m_chart->reset(timeline.devices, labels, highlight);
    if (cpuFloor) {
        m_chart->setCpuFloor(*cpuFloor);
    }
    for (const auto& s : timeline.samples) {
        m_chart->addSample(s);
    }
}

void TestLoadPanel::showReplay(const device::ReplayReport& r)
{
    showTimeline(r.timeline, QStringLiteral("cuda:0"));
    QString text = QStringLiteral("<b>%1</b>").arg(qs(r.verdict).toHtmlEscaped());
    for (const auto& d : r.devices) {
        text += QStringLiteral("<br>") + tr("%1: %2 context(s), %3 cop(ies) of the weights, measured peak %4")
                                             .arg(qs(d.device))
                                             .arg(d.contexts)
                                             .arg(d.weightCopies)
                                             .arg(humanSize(d.measuredPeakBytes));
    }
    m_summary->setText(text);
}

void TestLoadPanel::showReport(const device::TestloadReport& r)
{
    showTimeline(r.timeline, qs(r.device), cpuFloorFor(r));
    const QString other = otherGpusText(r);
    QString text = tr("<b>Loaded on %1</b>: %2 tensors, %3 in %4 (%5); %6; %7.")
                       .arg(qs(r.device).toHtmlEscaped())
                       .arg(r.tensorsLoaded)
                       .arg(humanSize(r.bytes))
                       .arg(durationText(r.seconds))
                       .arg(rateText(r.bytes, r.seconds), peakText(r), other);
    if (!r.skipped.empty()) {
        // Why, in the engine's words (core/device/load_selection.cpp): the first reason, and how many
        // share it, so a checkpoint of meta tensors says it holds no data rather than loading 0 B.
        const auto& first = r.skipped.front();
        const auto same = std::count_if(r.skipped.begin(), r.skipped.end(),
                                        [&](const device::SkippedTensor& s) { return s.reason == first.reason; });
        text += tr(" %n tensor(s) skipped", nullptr, static_cast<int>(r.skipped.size())) +
                QStringLiteral(": %1 (%2%3).")
                    .arg(qs(first.reason).toHtmlEscaped(), qs(first.path).toHtmlEscaped(),
                         same > 1 ? tr(" and %n more", nullptr, static_cast<int>(same - 1)) : QString());
    }
    if (r.engine == "cuda" && r.contextSource != "unknown") {
        text += tr(" The CUDA context took %1; torch.load(map_location='%2') would peak at %3.")
                    .arg(humanSize(r.contextBytes), qs(r.device).toHtmlEscaped(), humanSize(r.torchPeakBytes));
    } else if (r.engine == "cuda") {
        text += tr(" The CUDA context's cost is unknown here; torch.load(map_location='%1') would reserve %2 on top "
                   "of it.")
                    .arg(qs(r.device).toHtmlEscaped(), humanSize(r.torchReservedBytes));
    }
    if (!r.torchVersion.empty()) {
        text += QStringLiteral(" <span style='color:gray'>torch %1</span>").arg(qs(r.torchVersion).toHtmlEscaped());
    }
    m_summary->setText(text);
}

}  // namespace ckpt::ui
