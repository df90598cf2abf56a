# Writes OUTPUT, the source of meg::build_commit(): the commit of SOURCE_DIR as git names it, or
# "unknown" when SOURCE_DIR is not the top of a git checkout (a tarball, even one unpacked inside
# another repository). Run at every build (lib/CMakeLists.txt); OUTPUT is rewritten only when the
# commit changed, so an unchanged one recompiles nothing.
set(commit unknown)
find_program(GIT_EXECUTABLE git)
if(GIT_EXECUTABLE)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --show-toplevel --short HEAD
                  OUTPUT_VARIABLE out RESULT_VARIABLE failed ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT failed)
    string(REPLACE "\n" ";" out "${out}")
    list(GET out 0 top)
    list(GET out 1 hash)
    file(REAL_PATH "${top}" top)
    file(REAL_PATH "${SOURCE_DIR}" source)
    if(top STREQUAL source)
      set(commit ${hash})
    endif()
  endif()
endif()
set(text "// Written by cmake/build_commit.cmake at build time.\n#include \"core/build_info.hpp\"\n\nstd::string meg::build_commit() { return \"${commit}\"; }\n")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUTPUT} "${text}")
endif()
