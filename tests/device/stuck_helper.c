/* A test-load helper that reports a device error and then cannot be reaped, as a CUDA engine stuck in
 * the NVIDIA driver after an Xid cannot: SIGKILL is delivered but the process does not go away for its
 * parent. A process of its own (the "tracer", in a session of its own so the client's kill of the
 * helper's process group misses it) attaches to the helper with ptrace and never waits for it: the
 * helper, once killed, stays a zombie only the tracer may reap, and the client's waitpid blocks until
 * the tracer goes. The tracer writes its pid to $STUCK_HELPER_TRACER (-1 when this kernel does not let
 * it attach) so the test can end it; it ends itself after two minutes in any case. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <unistd.h>

int main(void)
{
    char request[4096];
    if (!fgets(request, sizeof request, stdin)) {
        return 2;
    }
    const pid_t helper = getpid();
    int ready[2];
    if (pipe(ready) != 0) {
        return 2;
    }
    const pid_t tracer = fork();
    if (tracer == 0) {
        setsid();
        alarm(120);
        const int attached = ptrace(PTRACE_SEIZE, helper, NULL, NULL) == 0;
        const char* path = getenv("STUCK_HELPER_TRACER");
        FILE* f = path ? fopen(path, "w") : NULL;
        if (f) {
            fprintf(f, "%d\n", attached ? (int)getpid() : -1);
            fclose(f);
        }
        if (write(ready[1], "x", 1) != 1 || !attached) {
            _exit(1);
        }
        for (;;) {
            pause();
        }
    }
    char c = 0;
    if (tracer < 0 || read(ready[0], &c, 1) != 1) {
        return 2;
    }
    printf("{\"event\":\"error\",\"code\":\"LoadFailed\",\"message\":\"copying to cuda:0: CUDA error 999: unspecified "
           "launch failure\"}\n");
    fflush(stdout);
    for (;;) {
        pause(); /* as a process blocked in the driver: it says no more and does not exit */
    }
}
