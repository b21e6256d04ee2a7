#include "remote/connections.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace ckpt::remote {

std::shared_ptr<HttpClient> Connections::borrow() const
{
    const std::lock_guard lock(mutex_);
    if (idle_.empty()) {
        return model_->another();
    }
    auto c = std::move(idle_.back());
    idle_.pop_back();
    return c;
}

void Connections::giveBack(std::shared_ptr<HttpClient> client) const
{
    const std::lock_guard lock(mutex_);
    idle_.push_back(std::move(client));
}

void Connections::run(std::size_t n, const Job& job) const
{
    if (n == 0) {
        return;
    }
    std::atomic<std::size_t> next{0};
    auto work = [&]() {
        auto client = borrow();
        for (std::size_t k = next++; k < n; k = next++) {
            job(k, client);
        }
        giveBack(std::move(client));
    };
    if (n == 1) {
        work();
        return;
    }
    std::vector<std::jthread> workers;
    for (std::size_t i = 0; i < std::min(kParallelConnections, n); ++i) {
        workers.emplace_back(work);
    }
}

}  // namespace ckpt::remote
