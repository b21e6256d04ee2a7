// dlopen's and dlsym's failure text, taken so that glibc's record of it is released. glibc (2.34+)
// keeps each thread's last dl error (two small allocations) until dlerror() has returned it and is
// called once more; a thread that exits before then leaks it, and LeakSanitizer says so (the
// window probes for libcuda and NVML from worker threads on machines that have neither).
#pragma once

#include <dlfcn.h>
#include <string>

namespace ckpt::device {

// The pending dl error's text ("" when none), with glibc's record freed.
inline std::string takeDlError()
{
    const char* e = ::dlerror();
    std::string text = e != nullptr ? e : "";
    (void)::dlerror();  // the second call frees the record the first one returned
    return text;
}

}  // namespace ckpt::device
