// Test-load: pick a device from the inventory (every GPU with its name and free memory, and the
// CPU), load the checkpoint there (a GPU through the CUDA engine, the CPU through the LibTorch
// helper) while a live chart shows every device's memory, then summarise peak, time, GB/s, the
// context's cost, torch.load's predicted peak and whether another GPU was touched. "Simulate DDP
// ranks" replays N ranks each calling torch.load, with or without map_location, on the same chart.
#pragma once

#include "document.h"
#include "jobtracker.h"

#include <QWidget>

#include <memory>
#include <optional>

class QComboBox;
class QSpinBox;
class QLabel;
class QProgressBar;
class QPushButton;

namespace ckpt::device {
class Nvml;
struct Inventory;
struct TestloadReport;
struct ReplayReport;
struct Timeline;
}  // namespace ckpt::device

namespace ckpt::ui {

class MemoryChart;

// The line under the device list: the driver and GPU count, or in plain words why there is no GPU
// ("No NVIDIA driver found" rather than the dlopen error, which goes to the tooltip).
[[nodiscard]] QString gpuNoteText(const device::Inventory& inv);
// The summary's peak: what was measured and by whom, in the chart's terms for a CPU load.
[[nodiscard]] QString peakText(const device::TestloadReport& r);
// Whether another GPU moved, or that no GPU was watched at all (without NVML nothing can be claimed).
[[nodiscard]] QString otherGpusText(const device::TestloadReport& r);

class TestLoadPanel : public QWidget {
    Q_OBJECT
public:
    explicit TestLoadPanel(QWidget* parent = nullptr);
    void setDocument(DocumentPtr doc);
    [[nodiscard]] MemoryChart* chart() const { return m_chart; }
    void refreshDevices();
    // The menu's Test Load (Ctrl+L): what the Load button does, when it is enabled.
    void requestLoad();
    // The menu's Simulate DDP Ranks (Ctrl+Shift+L): what its button does, when it is enabled.
    void requestReplay();
    // Whether the replay can run here: it needs a GPU (found once devicesReady() has come).
    [[nodiscard]] bool offersReplay() const;

Q_SIGNALS:
    void devicesReady();
    void loadFinished(bool ok);

private:
    void startLoad();
    void startReplay();
    // Ends a load or a replay: the controls come back, then its report or its error shows.
    template <class Report>
    void finishRun(const Expected<Report>& result, void (TestLoadPanel::*showResult)(const Report&));
    // Resets the chart to the devices of the combo box and feeds it from a sampler of its own.
    void prepareChart(const std::string& highlight);
    // `cpuFloor`: the level the CPU line rises from (the helper's own memory), else its first sample.
    void showTimeline(const device::Timeline& timeline, const QString& highlight,
                      std::optional<std::uint64_t> cpuFloor = std::nullopt);
    void showReplay(const device::ReplayReport& report);
    void setBusy(bool busy);
    void showInventory(const device::Inventory& inv);
    void showReport(const device::TestloadReport& report);
    std::shared_ptr<const device::Nvml> m_nvml;

    DocumentPtr m_doc;
    QComboBox* m_device;
    QPushButton* m_refresh;
    QPushButton* m_load;
    QPushButton* m_cancel;
    QSpinBox* m_ranks;
    QComboBox* m_mapLocation;
    QPushButton* m_replay;
    QProgressBar* m_progress;
    QLabel* m_note;
    MemoryChart* m_chart;
    QLabel* m_summary;
    bool m_devicesQueried = false;
    JobTracker m_inventoryJobs{this};
    JobTracker m_loadJobs{this};  // last: destroyed (stopped and joined) before the widgets above
};

}  // namespace ckpt::ui
