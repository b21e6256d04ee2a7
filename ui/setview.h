// A tab for a multi-file checkpoint (a Hugging Face sharded set, a ZeRO folder, ...): the
// consolidated model as one key tree (grouped by the dotted key's components) with each tensor's
// dtype, global shape, saved device, size and the file(s) holding it, the set's findings, and
// "Consolidate…", which writes the single-file checkpoint `ckptscope convert DIR -o OUT` writes.
// Reading and consolidating run off the GUI thread.
#pragma once

#include "sharded/listing.h"

#include <QWidget>

#include <memory>

class QLabel;
class QProgressBar;
class QPushButton;
class QStandardItemModel;
class QTreeView;
class QTreeWidget;

namespace ckpt::ui {

class JobTracker;
class SetMembershipBar;

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
    void askAndConsolidate();

    sharded::SetLocation m_loc;
    std::shared_ptr<const sharded::SetListing> m_listing;
    QString m_openedFile;
    SetMembershipBar* m_partOf;
    QLabel* m_header;
    QTreeWidget* m_findings;
    QTreeView* m_tree;
    QStandardItemModel* m_model;
    QPushButton* m_consolidate;
    QProgressBar* m_progress;
    QLabel* m_status;
    std::unique_ptr<JobTracker> m_jobs;
};

}  // namespace ckpt::ui
