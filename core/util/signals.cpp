#include "util/signals.h"

#include <cstddef>

namespace ckpt {

void onTerminationSignals(void (*handler)(int), std::array<struct sigaction, 32>* previous)
{
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    for (const int sig : kTerminationSignals) {
        sigaddset(&sa.sa_mask, sig);
    }
    for (const int sig : kTerminationSignals) {
        ::sigaction(sig, &sa, previous != nullptr ? &previous->at(static_cast<std::size_t>(sig)) : nullptr);
    }
}

}  // namespace ckpt
