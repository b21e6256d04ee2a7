// The main window: a tab per opened file, an empty state that says what to do, files opened by
// drag and drop anywhere, File > Open, recent files or the command line, an error banner with the
// same words the command line prints, and a status bar with format, tensors and bytes per device.
#pragma once

#include "document.h"
#include "sharded/sharded.h"

#include <QElapsedTimer>
#include <QMainWindow>

#include <functional>
#include <memory>
#include <stop_token>
#include <vector>

class QAction;
class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QStackedWidget;
class QTabWidget;

namespace ckpt::ui {

class DocumentView;
class JobTracker;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // Opens each file, folder or URL (http(s)://, hf://) in a worker; each success adds a tab, each
    // failure shows the error banner.
    void openFiles(const QStringList& paths);
    // Opens `path` as the one file it is, never the multi-file checkpoint it is part of (what
    // `ckptscope inspect --file-only` reads); switches to its tab when it is open alone already.
    void openFileAlone(const QString& path);
    [[nodiscard]] int documentCount() const;
    [[nodiscard]] DocumentView* documentView(int i) const;
    [[nodiscard]] DocumentView* currentView() const;
    [[nodiscard]] QString errorText() const;
    [[nodiscard]] bool isOpening() const;
    // Stops every open in progress: no tab and no error banner follow ("Opening cancelled").
    void cancelOpening();

    static const QString kDropHint;
    static constexpr QSize kPreferredSize{1280, 800};
    // The first size without saved geometry: the preferred one, shrunk to fit the available screen.
    [[nodiscard]] static QSize initialSize(const QSize& available);
    // A saved geometry as it opens on the screen there is now: no larger than a first size may be
    // (1600×960 saved on a larger screen, restored on 1366×768, hid the right column and the status
    // bar), and centred when any of it would lie off the screen.
    [[nodiscard]] static QRect fittedGeometry(const QRect& saved, const QRect& available);
    // A tab's title: the file name, its middle cut when long (the tab's tooltip has the full path).
    [[nodiscard]] static QString tabTitle(const QString& fileName);
    // An Open Recent entry: "name — folder", since many checkpoints share a name.
    [[nodiscard]] static QString recentTitle(const QString& path);
    // The checkpoint files in a folder (a Hugging Face Trainer checkpoint-N/, a DeepSpeed run):
    // names ending as torch.save and safetensors files do, two levels deep, sorted by path.
    [[nodiscard]] static QStringList checkpointFilesIn(const QString& folder);

    // The banner's errors as plain text, one line each (several files opened together each keep
    // theirs); empty when the banner is hidden.
    [[nodiscard]] QStringList bannerErrors() const;
    // Where File > Open and Compare With start: the current tab's folder, else the last one used.
    [[nodiscard]] QString dialogFolder() const;

Q_SIGNALS:
    void documentOpened(const QString& path);
    void openFailed(const QString& path, const QString& message);
    // A folder with checkpoint files was opened: the banner lists them to open one.
    void folderOffered(const QString& folder, const QStringList& files);
    // A multi-file checkpoint was opened as one tab (a DocumentView whose document has a SetPart).
    void setOpened(const QString& path);

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    void closeEvent(QCloseEvent* event) override;

private:
    void buildMenus();
    void buildHelpMenu();
    // Every file, folder or URL asked for by one act of the user (one drop, one Open, the command
    // line) is one batch: the banner collects every error of the batch, however many tabs open
    // after it, and the next act clears it.
    void startBatch();
    // Adds a line to the banner (earlier ones stay); `html`: the rich-text line, with a link, when it
    // has one; `error`: false for what is only information (a folder's checkpoint files).
    void showError(const QString& message, const QString& html = QString(), bool error = true);
    // Shows the banner's lines: one error as the command line prints it, several as a list.
    void renderBanner();
    // The tab of this input (a file's or folder's absolute path, a URL) when it is open; a file
    // opened alone (`alone`) and the set it belongs to are different tabs.
    [[nodiscard]] int tabOf(const QString& input, bool alone) const;
    // Switches to the tab of `input` and returns true when it is open, or being opened, already.
    bool alreadyOpen(const QString& input, bool alone);
    // An http(s) URL that the server sends only whole: offers the whole download in the banner.
    void offerWholeDownload(const QString& url, const QString& message);
    // The banner's look: red with the error icon for errors, neutral with the info icon for what
    // is only information (a folder's checkpoint files). Its "kind" property says which.
    void setBannerKind(bool error);
    // A folder was opened: list its checkpoint files as links that open them.
    bool offerFolder(const QString& folder);
    // `path` belongs to a multi-file checkpoint: read it in a worker and add its tab. False when
    // it is no such set (or a rank file that opens as a file of its own).
    bool openAsSet(const QString& path);
    // Reads the set at `loc` in a worker and adds its tab; `path` is what the user opened.
    void openSetAt(const sharded::SetLocation& loc, const QString& path);
    // The tab of the set a file tab belongs to: switched to when open, else opened.
    void openWholeSet(const sharded::SetLocation& loc);
    // Switches to the tab of the set at `loc` and returns true when it is open.
    bool switchToSet(const sharded::SetLocation& loc);
    // Runs `load` in a worker as one of the opens in progress (the status bar's Cancel stops them);
    // `opened` gets the document and its tab order on the GUI thread, `failed` the error's message.
    // `load` may tell its progress, which the status bar shows once an open has run a second.
    using OpenLoad = std::function<Expected<DocumentPtr>(std::stop_token, const OpenProgress&)>;
    // `input`: what is being opened, until it has (a second open of it waits for this one).
    void startOpen(const QString& shown, const QString& input, OpenLoad load,
                   std::function<void(const DocumentPtr&, int)> opened, std::function<void(const QString&)> failed);
    // The status bar's Cancel and progress while an open runs.
    void showOpening();
    void showOpenProgress(const QString& shown, double fraction, const QString& text);
    // An http(s) URL or hf:// location, read in a worker with range requests; its tab when it opens.
    // `whole`: downloaded whole into a temporary file (a server without range requests).
    void openRemoteDocument(const QString& url, bool whole = false);
    // `alone`: a file of a set opened by itself (Open This File Alone), remembered so in Open Recent.
    void openDocument(const QString& absolute, bool alone = false);
    // The error, and a link that opens `file` alone (a file whose set cannot be read as one).
    void showErrorOfSetFile(const QString& message, const QString& file);
    // `order`: when it was asked for (m_nextOpenOrder), which places its tab; -1 places it last.
    // `input`: what was opened (a path, a folder, a URL), by which a second open finds the tab;
    // `alone`: a file of a set opened by itself.
    DocumentView* addDocument(const DocumentPtr& doc, int order, const QString& input, bool alone = false);
    // Where a new tab asked for as `order` goes, so tabs keep the order of the paths opened.
    [[nodiscard]] int tabIndexFor(QWidget* tab, int order) const;
    void closeTab(int index);
    // Ctrl+PgDown / Ctrl+PgUp: the next or previous tab, round the end.
    void switchTab(int step);
    void updateChrome();
    // Run > Simulate DDP Ranks follows the current tab's test-load panel (it needs a GPU).
    void updateReplayAction();
    // File > Open This File Alone / Open the Whole Set follow the current tab.
    void updateSetActions();
    void rememberRecent(const QString& path, bool alone = false);
    void rebuildRecentMenu();

    QStackedWidget* m_stack;
    QTabWidget* m_tabs;
    QWidget* m_banner;
    QLabel* m_bannerText;
    QLabel* m_bannerIcon;
    QLabel* m_formatLabel;
    QLabel* m_tensorsLabel;
    QLabel* m_devicesLabel;
    QPushButton* m_cancelOpen;
    QProgressBar* m_openProgress;
    QElapsedTimer m_openingFor;  // since the first of the opens in progress started
    QMenu* m_recentMenu = nullptr;
    QAction* m_fileAloneAction = nullptr;
    QAction* m_wholeSetAction = nullptr;
    QAction* m_filesAction = nullptr;  // a set's Files panel
    QList<QAction*> m_fileTabActions;  // enabled only on a file's tab (a set tab has none of them)
    int m_nextOpenOrder = 0;
    std::vector<std::unique_ptr<JobTracker>> m_openJobs;  // one per file being opened
    QStringList m_opening;  // the inputs being opened ("alone:" before a file opened alone)
    // The banner's lines: plain text for errorText(), rich text shown; whether each is an error.
    struct BannerLine {
        QString plain;
        QString html;
        bool error = true;
    };
    QList<BannerLine> m_bannerLines;
};

}  // namespace ckpt::ui
