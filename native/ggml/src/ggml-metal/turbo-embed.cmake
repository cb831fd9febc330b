# tqgguf: inline our headers into an embedded Metal source (run by ggml-metal/CMakeLists.txt,
# patch 0010, after upstream's own inlining steps):
#   cmake -DSRC=<in> -DDST=<out> -DDIRS=<dir|dir|...> -P turbo-embed.cmake
# Each line `#include "NAME"` whose NAME is one of ours (turbo-*.h, ggml-turbo-*.h,
# ggml-cuda/turbo-pairs.h) becomes that file's text, found in DIRS in order, recursively;
# `#pragma once` lines of the inlined files are dropped (each of our headers is included once
# per kernel source). The embedded library is compiled from this one text at run time, where
# no include path exists.
string(REPLACE "|" ";" DIRS "${DIRS}")
set(TQ_INCLUDE_RE "#include \"((ggml-cuda/)?(ggml-)?turbo[-a-z]*\\.h)\"")
file(READ "${SRC}" text)
foreach(round RANGE 4)
    string(REGEX MATCHALL "${TQ_INCLUDE_RE}" incs "${text}")
    if (NOT incs)
        break()
    endif()
    list(REMOVE_DUPLICATES incs)
    foreach(inc IN LISTS incs)
        string(REGEX REPLACE "${TQ_INCLUDE_RE}" "\\1" name "${inc}")
        set(path "")
        foreach(dir IN LISTS DIRS)
            if (path STREQUAL "" AND EXISTS "${dir}/${name}")
                set(path "${dir}/${name}")
            endif()
        endforeach()
        if (path STREQUAL "")
            message(FATAL_ERROR "tqgguf: ${name} (included from ${SRC}) not found in ${DIRS}")
        endif()
        file(READ "${path}" body)
        string(REGEX REPLACE "#pragma once[^\n]*\n" "" body "${body}")
        string(REPLACE "${inc}" "${body}" text "${text}")
    endforeach()
endforeach()
if (text MATCHES "${TQ_INCLUDE_RE}")
    message(FATAL_ERROR "tqgguf: includes nested too deep in ${SRC}")
endif()
file(WRITE "${DST}" "${text}")
