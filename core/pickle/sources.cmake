ckptscope_core_library(ckptscope_pickle
    SOURCES pickle/value.cpp pickle/unpickler.cpp pickle/pickler.cpp
    DEPS ckptscope_util)
