// Requests made several at a time, each on a connection of its own: a Hugging Face set's shards
// opened together (open_remote.cpp), and the ranges a reader prefetches of a remote folder's files,
// across the ranges of one file and across its files (a DCP folder's items: remote_folder.h,
// http_source.h). Made one after another, 256 items 4 MiB apart cost 256 round trips.
//
// An HttpClient is one connection (one curl handle, one transfer at a time). A pool starts from the
// connection the input was opened on and makes the others from it on demand (HttpClient::another:
// the same credentials, so each request is signed on its own; the same options, so a stop request
// ends every transfer; the same statistics and redirects), at most kParallelConnections at once for
// a run, and keeps them for the next run, so a later batch does not connect again.
#pragma once

#include "remote/http_client.h"

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace ckpt::remote {

// Requests in flight at once for one input: what browsers allow one host (6 to 8), and what a set of
// shards or a folder's items wait for in a few round trips instead of one each.
inline constexpr std::size_t kParallelConnections = 8;

class Connections {
public:
    // `first`: the connection the input was opened on, lent to runs like the others (used elsewhere
    // meanwhile, its own lock makes the two take turns).
    explicit Connections(std::shared_ptr<HttpClient> first) : model_(first), idle_{std::move(first)} {}

    using Job = std::function<void(std::size_t, const std::shared_ptr<HttpClient>&)>;
    // Runs job(k, client) for every k in [0, n) and returns once all have run: on the calling thread
    // when n is 1, otherwise on min(n, kParallelConnections) threads, each with a connection of its
    // own that it holds for the jobs it takes. A job reports its own failure (the others go on).
    void run(std::size_t n, const Job& job) const;

private:
    [[nodiscard]] std::shared_ptr<HttpClient> borrow() const;
    void giveBack(std::shared_ptr<HttpClient> client) const;

    std::shared_ptr<HttpClient> model_;  // what another() copies
    mutable std::mutex mutex_;
    mutable std::vector<std::shared_ptr<HttpClient>> idle_;
};

}  // namespace ckpt::remote
