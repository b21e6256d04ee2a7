// A tab for a multi-file checkpoint (a Hugging Face sharded set, a ZeRO folder, ...): the
// consolidated model as one key tree (grouped by the dotted key's components) with each tensor's
// dtype, global shape, saved device, size and the file(s) holding it, the set's findings, and
// "Consolidate…", which writes the single-file checkpoint `ckptscope convert DIR -o OUT` writes.
// Reading and consolidating run off the GUI thread.
#pragma once

#include "sharded/listing.h"

#include <QWidget>

#include <cstdint>
#include <functional>
#include <memory>

class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QStandardItemModel;
class QTimer;
class QTreeView;
class QTreeWidget;

namespace ckpt::ui {

class SetMembershipBar;
struct ConsolidateJob;

class SetView : public QWidget {
    Q_OBJECT
public:
    SetView(sharded::SetLocation loc, std::shared_ptr<const sharded::SetListing> listing, QWidget* parent = nullptr);
    ~SetView() override;
    SetView(const SetView&) = delete;
    SetView& operator=(const SetView&) = delete;
    SetView(SetView&&) = delete;
    SetView& operator=(SetView&&) = delete;

    [[nodiscard]] const sharded::SetListing& listing() const { return *m_listing; }
    [[nodiscard]] const sharded::SetLocation& location() const { return m_loc; }
    [[nodiscard]] QTreeView* tree() const { return m_tree; }
    [[nodiscard]] QTreeWidget* findingsList() const { return m_findings; }
    [[nodiscard]] QPushButton* consolidateButton() const { return m_consolidate; }
    [[nodiscard]] QPushButton* cancelButton() const { return m_cancel; }
    [[nodiscard]] QProgressBar* progressBar() const { return m_progress; }
    [[nodiscard]] QLineEdit* filterEdit() const { return m_filter; }
    // The selected finding in full: title, explanation, code and the files it names.
    [[nodiscard]] QLabel* findingDetails() const { return m_findingDetails; }
    [[nodiscard]] bool isConsolidating() const;
    // View > Filter Keys (Ctrl+F) on a set tab.
    void focusFilter();
    // Stops a running consolidation; failed() follows with the cancellation, and no file is left.
    void cancelConsolidate();
    // Test seam: called on the worker thread at each progress report of a consolidation, before
    // it looks whether it was cancelled (a test holds it there to close the tab mid-write).
    static void setConsolidateObserverForTest(std::function<void(std::uint64_t bytesWritten)> observer);
    [[nodiscard]] QString statusText() const;
    // The set was opened from one of its files (a rank file, a shard): the bar above the tree says
    // so and its button asks for that file alone (openFileAloneRequested).
    void offerFileAlone(const QString& file);
    [[nodiscard]] const QString& openedFile() const { return m_openedFile; }
    [[nodiscard]] SetMembershipBar* membershipBar() const { return m_partOf; }
    // Writes the consolidated checkpoint to `path` (no dialog); consolidated() or failed() follows.
    void consolidateTo(const QString& path);

Q_SIGNALS:
    void consolidated(const QString& path);
    void failed(const QString& message);
    void openFileAloneRequested(const QString& file);

private:
    void fillTree();
    void fillFindings();
    void showFindingDetails();
    void applyFilter();
    void askAndConsolidate();
    // The progress bar from the bytes the worker has written, against the set's size.
    void showConsolidateProgress();
    void consolidateFinished(const Expected<sharded::ConsolidateResult>& r, const QString& path);

    sharded::SetLocation m_loc;
    std::shared_ptr<const sharded::SetListing> m_listing;
    QString m_openedFile;
    SetMembershipBar* m_partOf;
    QLabel* m_header;
    QTreeWidget* m_findings;
    QLabel* m_findingDetails;
    QLineEdit* m_filter;
    QTreeView* m_tree;
    QStandardItemModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QPushButton* m_consolidate;
    QPushButton* m_cancel;
    QProgressBar* m_progress;
    QTimer* m_progressTimer;
    QLabel* m_status;
    // The running consolidation, shared with its worker; the tab never waits for it: closing asks
    // it to stop, and it removes its temporary file and ends on its own.
    std::shared_ptr<ConsolidateJob> m_job;
};

}  // namespace ckpt::ui
