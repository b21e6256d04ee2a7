// Another process on the fake machine (fake_gpu_state.h), as another job's would be: a child that only
// sleeps, charged with `bytes` on state slot `slot` (a physical GPU or a MIG instance). It dies with
// the test, even one that crashed (an ASan report), and writes nothing to the test's output; killed
// and reaped when dropped.
#pragma once

#include <csignal>
#include <cstdint>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include "fake_gpu_state.h"
}

class FakeGpuProcess {
public:
    FakeGpuProcess(int slot, std::uint64_t bytes) : pid_(fork())
    {
        if (pid_ == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            const int devNull = open("/dev/null", O_WRONLY);
            dup2(devNull, STDOUT_FILENO);
            dup2(devNull, STDERR_FILENO);
            pause();
            _exit(0);
        }
        FakeGpuState* s = fakeGpuState();
        for (auto& row : s->rows) {
            int free = 0;
            if (__atomic_compare_exchange_n(&row.pid, &free, static_cast<int>(pid_), false, __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST)) {
                row.device = slot;
                __atomic_store_n(&row.bytes, static_cast<unsigned long long>(bytes), __ATOMIC_SEQ_CST);
                break;
            }
        }
    }
    FakeGpuProcess(const FakeGpuProcess&) = delete;
    FakeGpuProcess& operator=(const FakeGpuProcess&) = delete;
    ~FakeGpuProcess()
    {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }
    [[nodiscard]] pid_t pid() const { return pid_; }

private:
    pid_t pid_;
};
