// Test-load: pick a device from the inventory (every GPU with its name and free memory, and the
// CPU), load the checkpoint there through the LibTorch helper while a live chart shows every
// device's memory, then summarise peak, time, GB/s and whether another GPU was touched.
#pragma once

#include "document.h"
#include "jobtracker.h"

#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;

namespace ckpt::device {
class Nvml;
struct Inventory;
struct TestloadReport;
}  // namespace ckpt::device

namespace ckpt::ui {

class MemoryChart;

class TestLoadPanel : public QWidget {
    Q_OBJECT
public:
    explicit TestLoadPanel(QWidget* parent = nullptr);
    void setDocument(DocumentPtr doc);
    [[nodiscard]] MemoryChart* chart() const { return m_chart; }
    void refreshDevices();

Q_SIGNALS:
    void devicesReady();
    void loadFinished(bool ok);

private:
    void startLoad();
    void setBusy(bool busy);
    void showInventory(const device::Inventory& inv);
    void showReport(const device::TestloadReport& report);
    std::shared_ptr<const device::Nvml> m_nvml;

    DocumentPtr m_doc;
    QComboBox* m_device;
    QPushButton* m_refresh;
    QPushButton* m_load;
    QPushButton* m_cancel;
    QProgressBar* m_progress;
    QLabel* m_note;
    MemoryChart* m_chart;
    QLabel* m_summary;
    bool m_devicesQueried = false;
    JobTracker m_inventoryJobs{this};
    JobTracker m_loadJobs{this};  // last: destroyed (stopped and joined) before the widgets above
};

}  // namespace ckpt::ui
