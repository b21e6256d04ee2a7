// One way to run work off the GUI thread (the pattern of hotspot's JobTracker):
// - a job runs in QtConcurrent with a std::stop_token and a throttled progress callback;
// - its result reaches the GUI thread through a QFutureWatcher, and only if it is still the
//   newest job of this tracker (a generation counter) and its context object is still alive;
// - starting a job requests stop on the previous one; destroying the tracker requests stop on
//   every job and waits for them, so a window can close while work is running.
// No nested event loops: callers never wait for a result, they are called back.
#pragma once

#include <QFuture>
#include <QFutureWatcher>
#include <QList>
#include <QObject>
#include <QPointer>
#include <QString>
#include <QtConcurrent/QtConcurrentRun>

#include <functional>
#include <memory>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace ckpt::ui {

// Called from the worker thread; cheap to call often (it forwards at most one update per 0.1 %).
using ProgressFn = std::function<void(double fraction, const QString& text)>;

class JobTracker {
public:
    explicit JobTracker(QObject* context);
    JobTracker(const JobTracker&) = delete;
    JobTracker& operator=(const JobTracker&) = delete;
    ~JobTracker();

    // Job: R(std::stop_token, const ProgressFn&), run on a worker thread.
    // Then: void(R), run on the GUI thread when this job is still the current one.
    template <class Job, class Then> void start(Job job, Then then)
    {
        using R = std::invoke_result_t<Job&, std::stop_token, const ProgressFn&>;
        requestStop();
        const auto generation = ++m_state->generation;
        m_state->running = true;
        std::stop_source stop;
        QPointer<QObject> context = m_context;
        auto state = m_state;
        auto progress = makeProgress(generation);
        auto future = QtConcurrent::run([job = std::move(job), token = stop.get_token(), progress]() mutable {
            return std::make_shared<R>(job(token, progress));
        });
        auto* watcher = new QFutureWatcher<std::shared_ptr<R>>(m_context);
        QObject::connect(watcher, &QFutureWatcherBase::finished, watcher,
                         [watcher, context, state, generation, then = std::move(then)]() mutable {
                             watcher->deleteLater();
                             if (!context || state->generation != generation) {
                                 return;  // superseded or cancelled by a newer job
                             }
                             state->running = false;
                             then(std::move(*watcher->result()));
                         });
        watcher->setFuture(future);
        m_jobs.append({QFuture<void>(future), std::move(stop)});
    }

    // Asks the current job to stop; it still reports (usually an ErrorCode::Cancelled result).
    void requestStop();
    // Requests stop on every job and blocks until all have returned (window close, tests).
    void stopAndWait();
    // True from start() until the current job's result has been delivered.
    [[nodiscard]] bool isRunning() const { return m_state->running; }
    // Progress of the current job, delivered on the GUI thread.
    void setProgressHandler(std::function<void(double, const QString&)> handler);

private:
    struct State {
        quint64 generation = 0;
        bool running = false;
        std::function<void(double, const QString&)> onProgress;
    };
    struct Job {
        QFuture<void> future;
        std::stop_source stop;
    };
    ProgressFn makeProgress(quint64 generation);
    void prune();

    QObject* m_context;
    std::shared_ptr<State> m_state;
    QList<Job> m_jobs;
};

}  // namespace ckpt::ui
