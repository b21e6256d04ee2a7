// Details of the selected node: a tensor's dtype, shape, stride, storage and offset, saved device,
// bytes and the tensors sharing its storage; on request its statistics (computed off the GUI
// thread), a histogram and a value preview; an object's qualified type and state.
#pragma once

#include "diagnose/values.h"
#include "document.h"
#include "jobtracker.h"

#include <QWidget>

class QLabel;
class QPushButton;
class QTextBrowser;

namespace ckpt::ui {

class HistogramWidget;

class DetailsPanel : public QWidget {
    Q_OBJECT
public:
    explicit DetailsPanel(QWidget* parent = nullptr);
    void setDocument(DocumentPtr doc);
    void showNode(NodeIndex node);
    void clearNode();
    [[nodiscard]] QString text() const;  // plain text of what is shown (tests)

Q_SIGNALS:
    void statisticsReady();

private:
    void computeStatistics();
    void showStatistics(const diagnose::TensorStats& s);
    [[nodiscard]] QString tensorHtml(const TensorEntry& t) const;
    [[nodiscard]] QString objectHtml(const Node& n) const;
    [[nodiscard]] QString containerHtml(NodeIndex node) const;

    DocumentPtr m_doc;
    NodeIndex m_node;
    QTextBrowser* m_text;
    QPushButton* m_statsButton;
    QLabel* m_statsLabel;
    HistogramWidget* m_histogram;
    QLabel* m_preview;
    JobTracker m_jobs{this};
};

}  // namespace ckpt::ui
