// A file that is one part of a multi-file checkpoint (a ZeRO rank file, a Hugging Face shard, a DCP
// .distcp file) opens its whole set, as `ckptscope inspect FILE` does; `--file-only` reads it alone.
// The window offers the same two views: a set tab opened from one of its files says so and opens
// that file alone, and a file tab whose file belongs to a set the window reads opens that set.
// Which set a file belongs to is core's answer (sharded::setInput), never
// decided here again.
#pragma once

#include "sharded/sharded.h"

#include <QFrame>
#include <QString>

#include <optional>

class QLabel;
class QPushButton;

namespace ckpt::ui {

// Whether the set tab for `loc` that `path` opened offers to open `path` alone: a checkpoint file
// of the set (a shard, a rank file), not its folder, its index, DeepSpeed's `latest` pointer or a DCP
// data file.
[[nodiscard]] bool opensAlone(const sharded::SetLocation& loc, const QString& path);

// For a file opened alone: the set the window opens as one tab for it (a ZeRO rank file's folder,
// an FSDP rank file's siblings), or none (a file of no set, of a set the window does not read, or
// of a ZeRO folder whose files each stand alone).
[[nodiscard]] std::optional<sharded::SetLocation> wholeSetOf(const QString& file);

// "the DeepSpeed ZeRO checkpoint in global_step10's folder /runs/x", for the banners' sentences.
[[nodiscard]] QString setPhrase(const sharded::SetLocation& loc);

// The strip at the top of a set or file tab: a sentence and the one button that switches view.
class SetMembershipBar : public QFrame {
    Q_OBJECT
public:
    explicit SetMembershipBar(QWidget* parent = nullptr);

    // `sentence` is rich text (escape what it quotes).
    void offer(const QString& sentence, const QString& buttonText);
    [[nodiscard]] QLabel* label() const { return m_text; }
    [[nodiscard]] QPushButton* button() const { return m_button; }

Q_SIGNALS:
    void activated();

private:
    QLabel* m_text;
    QPushButton* m_button;
};

}  // namespace ckpt::ui
