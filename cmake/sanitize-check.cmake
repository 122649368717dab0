# The ctest check `sanitize-build` (issue 11): the README's sanitizer command
# (EPD_CMAKE_ARGS=-DEPD_SANITIZE=ON ... scripts/test) must keep building. g++ reports warnings under
# -fsanitize that the normal build never sees (instrumentation changes inlining), so a change that builds
# cleanly can still break the sanitizer build, and nobody notices until someone runs it.
#
# Configures EPD_SANITIZE=ON in BUILD_DIR (same compiler and launcher as the calling build) and compiles
# SOURCES there - compile only, no link: the sanitizer-only failures are compiler warnings made errors.
#   cmake -DSOURCE_DIR=<repo> -DBUILD_DIR=<dir> -DCXX=<c++> [-DLAUNCHER=ccache] -DSOURCES=a.cpp,dir/b.cpp
#         [-DJOBS=2] -P cmake/sanitize-check.cmake      (sources relative to the repository, comma-separated)
cmake_minimum_required(VERSION 3.25)
foreach(var SOURCE_DIR BUILD_DIR CXX SOURCES)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "sanitize-check: ${var} not set")
  endif()
endforeach()
if(NOT DEFINED JOBS)
  set(JOBS 2)
endif()
string(REPLACE "," ";" SOURCES "${SOURCES}")

set(configure_args -S ${SOURCE_DIR} -B ${BUILD_DIR} -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=RelWithDebInfo
                   -DEPD_SANITIZE=ON -DEPD_UNITY=OFF -DCMAKE_CXX_COMPILER=${CXX})
if(LAUNCHER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} ${configure_args} RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sanitize-check: configuring ${BUILD_DIR} with EPD_SANITIZE=ON failed")
endif()

# Compile each listed source with its own command from compile_commands.json, JOBS at a time (the generated
# directory Makefiles build single objects only one after the other).
file(READ ${BUILD_DIR}/compile_commands.json db)
string(JSON count LENGTH "${db}")
math(EXPR last "${count} - 1")
set(found "")
set(rules "")
foreach(i RANGE ${last})
  string(JSON file GET "${db}" ${i} file)
  file(RELATIVE_PATH rel ${SOURCE_DIR} ${file})
  if(NOT rel IN_LIST SOURCES OR rel IN_LIST found)
    continue()
  endif()
  list(APPEND found ${rel})
  string(JSON dir GET "${db}" ${i} directory)
  string(JSON command GET "${db}" ${i} command)
  string(REPLACE "$" "$$" command "${command}")
  if(LAUNCHER)  # compile_commands.json leaves the launcher out
    set(command "${LAUNCHER} ${command}")
  endif()
  string(APPEND rules "all: check/${rel}\n.PHONY: check/${rel}\ncheck/${rel}:\n"
                      "\t@echo 'sanitize-check: compiling ${rel}'\n\t@cd ${dir} && ${command}\n")
endforeach()
foreach(src ${SOURCES})
  if(NOT src IN_LIST found)
    message(FATAL_ERROR "sanitize-check: ${src} is not compiled by any target (renamed? update the list)")
  endif()
endforeach()
file(WRITE ${BUILD_DIR}/sanitize-check.mk ".PHONY: all\n${rules}")
execute_process(COMMAND make -k -j${JOBS} -f sanitize-check.mk all WORKING_DIRECTORY ${BUILD_DIR}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sanitize-check: the sanitizer build (EPD_SANITIZE=ON) does not compile (errors above)")
endif()
list(LENGTH found n)
message(STATUS "sanitize-check: ${n} sources compile with EPD_SANITIZE=ON")
