// Python 2 <-> 3 module and name mapping (CPython's _compat_pickle), plus torch's own load-time
// module rename. Private to core/pickle.
#pragma once

#include <string>

namespace ckpt::pickle::detail {

// Unpickling: Python 2 names -> Python 3, applied for protocols < 3 as CPython does; the torch
// rename (`torch.tensor` -> `torch._tensor`) applies to every protocol.
void mapToPython3(std::string& module, std::string& name, int protocol);

// Pickling at protocol 2: Python 3 names -> the Python 2 names CPython's pickler writes.
void mapToPython2(std::string& module, std::string& name);

}  // namespace ckpt::pickle::detail
