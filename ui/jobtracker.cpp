#include "jobtracker.h"

#include <QMetaObject>

#include <atomic>
#include <mutex>

namespace ckpt::ui {

JobTracker::JobTracker(QObject* context) : m_context(context), m_state(std::make_shared<State>()) {}

JobTracker::~JobTracker()
{
    stopAndWait();
}

void JobTracker::requestStop()
{
    prune();
    for (auto& job : m_jobs) {
        job.stop.request_stop();
    }
}

void JobTracker::stopAndWait()
{
    ++m_state->generation;  // nothing that finishes now may reach a half-destroyed window
    m_state->running = false;
    for (auto& job : m_jobs) {
        job.stop.request_stop();
    }
    for (auto& job : m_jobs) {
        job.future.waitForFinished();
    }
    m_jobs.clear();
}

void JobTracker::setProgressHandler(std::function<void(double, const QString&)> handler)
{
    m_state->onProgress = std::move(handler);
}

ProgressFn JobTracker::makeProgress(quint64 generation)
{
    struct Throttle {
        std::mutex mutex;
        int lastPermille = -1;
        QString lastText;
    };
    auto throttle = std::make_shared<Throttle>();
    QPointer<QObject> context = m_context;
    auto state = m_state;
    QObject* target = m_context;  // alive while any job runs: the tracker waits for its jobs
    return [throttle, context, state, generation, target](double fraction, const QString& text) {
        const int permille = static_cast<int>(fraction * 1000.0);
        {
            std::lock_guard lock(throttle->mutex);
            if (permille == throttle->lastPermille && text == throttle->lastText) {
                return;
            }
            throttle->lastPermille = permille;
            throttle->lastText = text;
        }
        QMetaObject::invokeMethod(
            target,
            [context, state, generation, fraction, text] {
                if (context && state->generation == generation && state->onProgress) {
                    state->onProgress(fraction, text);
                }
            },
            Qt::QueuedConnection);
    };
}

void JobTracker::prune()
{
    m_jobs.removeIf([](const Job& j) { return j.future.isFinished(); });
}

}  // namespace ckpt::ui
