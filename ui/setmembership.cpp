#include "setmembership.h"

#include "dialogs.h"
#include "icons.h"
#include "sharded/listing.h"
#include "text.h"

#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>

namespace ckpt::ui {

namespace {

// The names the window opens as checkpoints (its File > Open filter). A set's other files describe
// it (an index, `latest`, `.metadata`), and a DCP `.distcp` holds several torch.save records back to
// back, which no reader of one file opens: none of those is offered alone.
bool checkpointName(const QString& name)
{
    return QDir::match(dialogs::checkpointPatterns(), name);
}

bool samePath(const QString& a, const QString& b)
{
    return QFileInfo(a).absoluteFilePath() == QFileInfo(b).absoluteFilePath();
}

}  // namespace

bool opensAlone(const sharded::SetLocation& loc, const QString& path)
{
    const QFileInfo info(path);
    return info.isFile() && !samePath(path, qs(loc.index)) && checkpointName(info.fileName());
}

std::optional<sharded::SetLocation> wholeSetOf(const QString& file)
{
    // A rank file that is read alone (FSDP's) still belongs to the set its folder opens as.
    auto loc = sharded::setInput(ss(file));
    if (!loc || !sharded::listsAsSet(loc->kind)) {
        return std::nullopt;
    }
    loc->alone = false;
    return loc;
}

QString setPhrase(const sharded::SetLocation& loc)
{
    return QObject::tr("the %1 in %2")
        .arg(qs(sharded::setKindName(loc.kind)), QDir::toNativeSeparators(QFileInfo(qs(loc.dir)).absoluteFilePath()));
}

SetMembershipBar::SetMembershipBar(QWidget* parent)
    : QFrame(parent), m_text(new QLabel(this)), m_button(new QPushButton(this))
{
    setObjectName(QStringLiteral("setMembershipBar"));
    setFrameShape(QFrame::StyledPanel);
    setAutoFillBackground(true);
    // The information blue, so it reads as "where this came from", not as the red error banner.
    QPalette p = palette();
    p.setColor(QPalette::Window, QColor(0xdd, 0xea, 0xf7));
    p.setColor(QPalette::WindowText, QColor(0x1f, 0x3b, 0x57));
    setPalette(p);
    auto* icon = new QLabel(this);
    icon->setPixmap(icons::severityInfo().pixmap(16, 16));
    m_text->setObjectName(QStringLiteral("setMembershipText"));
    m_text->setTextFormat(Qt::RichText);
    m_text->setWordWrap(true);
    m_text->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_button->setObjectName(QStringLiteral("setMembershipButton"));
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(8, 4, 4, 4);
    layout->addWidget(icon, 0, Qt::AlignVCenter);
    layout->addWidget(m_text, 1);
    layout->addWidget(m_button, 0, Qt::AlignVCenter);
    connect(m_button, &QPushButton::clicked, this, &SetMembershipBar::activated);
    hide();
}

void SetMembershipBar::offer(const QString& sentence, const QString& buttonText)
{
    m_text->setText(sentence);
    m_button->setText(buttonText);
    show();
}

}  // namespace ckpt::ui
