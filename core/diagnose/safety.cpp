#include "diagnose/safety.h"

#include "transform/allowlist.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <utility>

namespace ckpt::diagnose {
namespace {

struct Unsafe {
    std::string_view name;  // module, or module.function
    std::string_view reason;
};

// Whole modules: every global in them executes code, spawns processes, touches the file system,
// imports, deserialises further data, or reaches the network.
constexpr std::array<Unsafe, 46> kUnsafeModules{{
    {"os", "runs shell commands and changes files (os.system, os.popen, os.exec*, os.remove, ...)"},
    {"posix", "runs shell commands and changes files (the os module's POSIX backend)"},
    {"nt", "runs shell commands and changes files (the os module's Windows backend)"},
    {"subprocess", "starts arbitrary programs"},
    {"_posixsubprocess", "starts arbitrary programs (subprocess's backend)"},
    {"pty", "spawns programs on a pseudo-terminal"},
    {"commands", "runs shell commands (Python 2)"},
    {"popen2", "runs shell commands (Python 2)"},
    {"platform", "runs shell commands (platform.popen)"},
    {"runpy", "runs Python modules and files"},
    {"importlib", "imports arbitrary modules"},
    {"imp", "imports arbitrary modules"},
    {"pkgutil", "imports arbitrary modules"},
    {"code", "evaluates Python source"},
    {"codeop", "compiles Python source"},
    {"pdb", "evaluates Python source in the debugger"},
    {"bdb", "evaluates Python source in the debugger"},
    {"timeit", "evaluates Python source"},
    {"trace", "runs Python code"},
    {"profile", "runs Python code"},
    {"cProfile", "runs Python code"},
    {"doctest", "runs Python code found in text"},
    {"idlelib", "evaluates Python source"},
    {"pickle", "unpickles further data, which can run anything"},
    {"_pickle", "unpickles further data, which can run anything"},
    {"cPickle", "unpickles further data, which can run anything (Python 2)"},
    {"dill", "unpickles further data, which can run anything"},
    {"cloudpickle", "unpickles further data, which can run anything"},
    {"joblib", "unpickles further data, which can run anything"},
    {"shelve", "unpickles further data and opens files"},
    {"marshal", "loads Python bytecode"},
    {"types", "builds functions and code objects from raw bytecode"},
    {"ctypes", "calls native code"},
    {"_ctypes", "calls native code"},
    {"cffi", "calls native code"},
    {"shutil", "copies, moves and deletes files"},
    {"tempfile", "creates files"},
    {"sys", "changes the interpreter (modules, paths, hooks)"},
    {"webbrowser", "opens URLs and starts programs"},
    {"socket", "opens network connections"},
    {"urllib", "fetches URLs"},
    {"http", "opens network connections"},
    {"requests", "fetches URLs"},
    {"ftplib", "opens network connections"},
    {"multiprocessing", "starts processes and unpickles data"},
    {"asyncio", "starts processes (asyncio.subprocess) and opens connections"},
}};

// Single callables in otherwise harmless modules.
constexpr std::array<Unsafe, 38> kUnsafeCallables{{
    {"builtins.eval", "evaluates Python source"},
    {"builtins.exec", "executes Python source"},
    {"builtins.execfile", "executes a Python file (Python 2)"},
    {"builtins.compile", "compiles Python source into runnable code"},
    {"builtins.__import__", "imports arbitrary modules"},
    {"builtins.getattr", "reads any attribute of any object (the usual gadget to reach os.system)"},
    {"builtins.setattr", "changes any attribute of any object"},
    {"builtins.delattr", "deletes attributes of any object"},
    {"builtins.globals", "exposes the interpreter's global namespace"},
    {"builtins.locals", "exposes the interpreter's local namespace"},
    {"builtins.vars", "exposes an object's namespace"},
    {"builtins.open", "opens (and can truncate) files"},
    {"builtins.file", "opens files (Python 2)"},
    {"builtins.input", "reads from the terminal"},
    {"builtins.breakpoint", "starts the debugger"},
    {"builtins.reload", "re-imports modules (Python 2)"},
    {"builtins.apply", "calls any callable (Python 2)"},
    {"builtins.exit", "ends the process"},
    {"builtins.quit", "ends the process"},
    {"builtins.help", "starts the help system (imports modules)"},
    {"builtins.memoryview", "exposes raw memory"},
    {"operator.attrgetter", "reads any attribute of any object (a gadget to reach os.system)"},
    {"operator.methodcaller", "calls any method of any object"},
    {"_operator.attrgetter", "reads any attribute of any object (a gadget to reach os.system)"},
    {"_operator.methodcaller", "calls any method of any object"},
    {"functools.partial", "binds arguments to any callable (a gadget to call anything)"},
    {"functools.reduce", "calls any callable repeatedly"},
    {"io.open", "opens (and can truncate) files"},
    {"io.FileIO", "opens (and can truncate) files"},
    {"_io.open", "opens (and can truncate) files"},
    {"_io.FileIO", "opens (and can truncate) files"},
    {"codecs.open", "opens (and can truncate) files"},
    {"pydoc.pipepager", "runs a shell command"},
    {"pydoc.locate", "imports modules and reaches any attribute"},
    {"numpy.load", "loads files, with pickles inside when allowed"},
    {"numpy.testing._private.utils.runstring", "executes Python source"},
    {"torch.load", "loads another file, running its pickle"},
    {"torch.hub.load", "downloads and runs code from a repository"},
}};

constexpr std::array<std::pair<int, std::string_view>, 68> kOpcodeNames{{
    {0x28, "MARK"},
    {0x2e, "STOP"},
    {0x30, "POP"},
    {0x31, "POP_MARK"},
    {0x32, "DUP"},
    {0x46, "FLOAT"},
    {0x49, "INT"},
    {0x4a, "BININT"},
    {0x4b, "BININT1"},
    {0x4c, "LONG"},
    {0x4d, "BININT2"},
    {0x4e, "NONE"},
    {0x50, "PERSID"},
    {0x51, "BINPERSID"},
    {0x52, "REDUCE"},
    {0x53, "STRING"},
    {0x54, "BINSTRING"},
    {0x55, "SHORT_BINSTRING"},
    {0x56, "UNICODE"},
    {0x58, "BINUNICODE"},
    {0x61, "APPEND"},
    {0x62, "BUILD"},
    {0x63, "GLOBAL"},
    {0x64, "DICT"},
    {0x7d, "EMPTY_DICT"},
    {0x65, "APPENDS"},
    {0x67, "GET"},
    {0x68, "BINGET"},
    {0x69, "INST"},
    {0x6a, "LONG_BINGET"},
    {0x6c, "LIST"},
    {0x5d, "EMPTY_LIST"},
    {0x6f, "OBJ"},
    {0x70, "PUT"},
    {0x71, "BINPUT"},
    {0x72, "LONG_BINPUT"},
    {0x73, "SETITEM"},
    {0x74, "TUPLE"},
    {0x29, "EMPTY_TUPLE"},
    {0x75, "SETITEMS"},
    {0x47, "BINFLOAT"},
    {0x80, "PROTO"},
    {0x81, "NEWOBJ"},
    {0x82, "EXT1"},
    {0x83, "EXT2"},
    {0x84, "EXT4"},
    {0x85, "TUPLE1"},
    {0x86, "TUPLE2"},
    {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"},
    {0x89, "NEWFALSE"},
    {0x8a, "LONG1"},
    {0x8b, "LONG4"},
    {0x42, "BINBYTES"},
    {0x43, "SHORT_BINBYTES"},
    {0x8c, "SHORT_BINUNICODE"},
    {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"},
    {0x8f, "EMPTY_SET"},
    {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"},
    {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"},
    {0x94, "MEMOIZE"},
    {0x95, "FRAME"},
    {0x96, "BYTEARRAY8"},
    {0x97, "NEXT_BUFFER"},
    {0x98, "READONLY_BUFFER"},
}};

// docs/format.md §5.3: the opcodes torch's weights-only Unpickler.load handles.
constexpr std::array<int, 34> kWeightsOnlyOpcodes{
    0x80, 0x2e, 0x63, 0x81, 0x52, 0x62, 0x61, 0x65, 0x73, 0x75, 0x28, 0x74, 0x85, 0x86, 0x87, 0x4e, 0x89,
    0x88, 0x29, 0x5d, 0x7d, 0x8f, 0x4a, 0x4b, 0x4d, 0x47, 0x58, 0x55, 0x51, 0x68, 0x6a, 0x71, 0x72, 0x8a,
};

bool moduleMatches(std::string_view qualified, std::string_view module)
{
    return qualified.size() > module.size() && qualified.starts_with(module) && qualified[module.size()] == '.';
}

}  // namespace

bool isWeightsOnlyAllowed(std::string_view q)
{
    return transform::weightsOnlyAllowed(q);
}

std::optional<std::string_view> unsafeReason(std::string_view q)
{
    for (const auto& u : kUnsafeCallables) {
        if (u.name == q) {
            return u.reason;
        }
    }
    for (const auto& u : kUnsafeModules) {
        if (moduleMatches(q, u.name)) {
            return u.reason;
        }
    }
    // convert drops whatever transform's blocklist names: say so here too, in general words.
    if (transform::unsafeCallable(q)) {
        return "can run arbitrary code when called";
    }
    return std::nullopt;
}

std::vector<RefusedOpcode> refusedOpcodes(const std::bitset<256>& seen)
{
    std::vector<RefusedOpcode> out;
    for (int op = 0; op < 256; ++op) {
        if (!seen.test(static_cast<std::size_t>(op))) {
            continue;
        }
        if (std::find(kWeightsOnlyOpcodes.begin(), kWeightsOnlyOpcodes.end(), op) != kWeightsOnlyOpcodes.end()) {
            continue;
        }
        std::string_view name = "unknown";
        for (const auto& [code, n] : kOpcodeNames) {
            if (code == op) {
                name = n;
            }
        }
        out.push_back({op, name});
    }
    return out;
}

std::string opcodeName(int code)
{
    for (const auto& [c, n] : kOpcodeNames) {
        if (c == code) {
            return std::string(n);
        }
    }
    std::array<char, 16> buf{};
    std::snprintf(buf.data(), buf.size(), "opcode 0x%02x", code);
    return buf.data();
}

}  // namespace ckpt::diagnose
