// A panel that lists files (a set's, a model folder's) under a line about them, with a button that
// opens the selected one in a tab of its own (a double-click does the same). What each row says and
// whether it opens is the subclass's.
#pragma once

#include <QWidget>

class QLabel;
class QPushButton;
class QTreeWidget;
class QTreeWidgetItem;

namespace ckpt::ui {

class FileListPanel : public QWidget {
    Q_OBJECT
public:
    [[nodiscard]] QTreeWidget* list() const { return m_list; }
    [[nodiscard]] int count() const;
    // The item data role (column 0) that holds a row's path.
    static constexpr int kPathRole = Qt::UserRole + 1;

Q_SIGNALS:
    void openFileRequested(const QString& path);

protected:
    // `button`: the open button's text; `listName`, `buttonName`: their object names.
    FileListPanel(const QString& button, const char* listName, const char* buttonName, QWidget* parent);
    // Whether `item` (never null) opens on its own; `tip` is set to the button's tooltip for it.
    [[nodiscard]] virtual bool opens(const QTreeWidgetItem* item, QString& tip) const = 0;
    [[nodiscard]] QLabel* header() const { return m_header; }
    [[nodiscard]] QPushButton* openButton() const { return m_open; }
    // Selects the first row, which enables the button when it opens.
    void selectFirst();

private:
    void selectionChanged();
    void openSelected();

    QLabel* m_header;
    QTreeWidget* m_list;
    QPushButton* m_open;
};

}  // namespace ckpt::ui
