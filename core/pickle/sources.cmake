ckptscope_core_library(ckptscope_pickle
    SOURCES
        pickle/value.cpp
        pickle/repr.cpp
        pickle/numpy.cpp
        pickle/unpickler.cpp
        pickle/torch_globals.cpp
        pickle/pickler.cpp
        pickle/compat.cpp
        pickle/text.cpp
    DEPS ckptscope_util)
