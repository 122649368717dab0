# Every third-party dependency comes from a Debian 12 package (scripts/setup-deps installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(msgpack CONFIG REQUIRED)          # libmsgpack-cxx-dev: the control-plane body encoding
find_package(spdlog CONFIG REQUIRED)           # libspdlog-dev: logs
find_package(cppzmq CONFIG REQUIRED)           # cppzmq-dev: control plane sockets
find_package(tomlplusplus CONFIG REQUIRED)     # libtomlplusplus-dev: config files
find_package(prometheus-cpp CONFIG REQUIRED)   # prometheus-cpp-dev: metrics registry and text format
find_package(Catch2 CONFIG REQUIRED)           # catch2: tests
include(Catch)

# libcaf-dev ships no CMake package: find it by hand (stack-notes).
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
add_library(caf::core SHARED IMPORTED)
set_target_properties(caf::core PROPERTIES IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
                                           INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR})

find_path(HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)   # libcpp-httplib-dev: the router's HTTP API
# Debian builds cpp-httplib in split mode: httplib.h only declares, libcpp-httplib.so implements, and the
# library was compiled with OpenSSL/zlib/brotli support. Those macros change class layouts (Request gains a
# member), so every user must link httplib::httplib (it carries the defines and the library), not just include.
pkg_check_modules(CPPHTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)
add_library(httplib::httplib ALIAS PkgConfig::CPPHTTPLIB)
find_package(nlohmann_json CONFIG REQUIRED)  # nlohmann-json3-dev: JSON bodies of the HTTP API
# libpng-dev, libturbojpeg0-dev: the PNG and JPEG images clients send (model/src/image_codec.cpp).
pkg_check_modules(LIBPNG REQUIRED IMPORTED_TARGET GLOBAL libpng)
add_library(png::png ALIAS PkgConfig::LIBPNG)
pkg_check_modules(TURBOJPEG REQUIRED IMPORTED_TARGET GLOBAL libturbojpeg)
add_library(turbojpeg::turbojpeg ALIAS PkgConfig::TURBOJPEG)
# libnghttp2-dev: HTTP/2 for the gRPC stream that renews etcd leases (etcd/src/lease_stream.cpp).
pkg_check_modules(NGHTTP2 REQUIRED IMPORTED_TARGET GLOBAL libnghttp2)
# libopenblas-dev: sgemm for the checkpoint runner's prefill (model/src/kernels/weight_matrix.cpp).
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET GLOBAL openblas)
find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)   # libcli11-dev: command-line flags
find_library(XXHASH_LIBRARY xxhash REQUIRED)        # libxxhash-dev: checksums in tests and benches
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
add_library(xxhash::xxhash UNKNOWN IMPORTED)
set_target_properties(xxhash::xxhash PROPERTIES IMPORTED_LOCATION ${XXHASH_LIBRARY}
                                                INTERFACE_INCLUDE_DIRECTORIES ${XXHASH_INCLUDE_DIR})

set(EPD_HAVE_RDMA OFF)
if(EPD_WITH_RDMA)
  pkg_check_modules(IBVERBS IMPORTED_TARGET libibverbs)
  if(IBVERBS_FOUND)
    set(EPD_HAVE_RDMA ON)
  endif()
endif()
# libboost-dev: Boost.Beast (HTTP/1.1 parsing) over Boost.Asio for the router's asynchronous HTTP server;
# header-only in Boost 1.74.
find_package(Boost 1.74 REQUIRED)

# llama.cpp's ggml: the quantized tensor types' kernels (model/src/kernels/ggml/). Debian packages no llama.cpp; the
# npm package node-llama-cpp (pinned in tests/http/node/package-lock.json, installed by scripts/setup-deps)
# ships its CPU libraries prebuilt, one CPU back end per instruction set, and its source as a git bundle.
# epd loads the libraries at run time (dlopen, only when a tensor needs them) and takes only the headers
# from the bundle, cloned once into the build tree. The release tag is checked, so a changed npm pin cannot
# silently pair other libraries with these headers.
set(EPD_LLAMA_CPP_TAG v0.5.0)
set(EPD_NODE_MODULES ${PROJECT_SOURCE_DIR}/tests/http/node/node_modules)
set(EPD_GGML_DIR "${EPD_NODE_MODULES}/@node-llama-cpp/linux-x64/bins/linux-x64"
    CACHE PATH "Directory of the prebuilt libggml-base.so and libggml-cpu-*.so")
set(EPD_LLAMA_CPP_INFO ${EPD_NODE_MODULES}/node-llama-cpp/llama/llama.cpp.info.json)
if(NOT EXISTS ${EPD_LLAMA_CPP_INFO} OR NOT EXISTS ${EPD_GGML_DIR}/libggml-base.so)
  message(FATAL_ERROR "node-llama-cpp is not installed (${EPD_GGML_DIR}): run scripts/setup-deps")
endif()
file(READ ${EPD_LLAMA_CPP_INFO} _llama_info)
string(JSON _llama_tag GET ${_llama_info} tag)
if(NOT _llama_tag STREQUAL EPD_LLAMA_CPP_TAG)
  message(FATAL_ERROR "node-llama-cpp carries llama.cpp ${_llama_tag}, epd is pinned to ${EPD_LLAMA_CPP_TAG}")
endif()
set(EPD_LLAMA_CPP_SRC ${PROJECT_BINARY_DIR}/_deps/llama.cpp-${EPD_LLAMA_CPP_TAG})
if(NOT EXISTS ${EPD_LLAMA_CPP_SRC}/ggml/include/ggml.h)
  find_package(Git REQUIRED)
  file(REMOVE_RECURSE ${EPD_LLAMA_CPP_SRC})
  execute_process(COMMAND ${GIT_EXECUTABLE} -c advice.detachedHead=false clone --quiet
                          ${EPD_NODE_MODULES}/node-llama-cpp/llama/gitRelease.bundle ${EPD_LLAMA_CPP_SRC}
                  RESULT_VARIABLE _clone_rc)
  if(NOT _clone_rc EQUAL 0)
    message(FATAL_ERROR "cannot clone llama.cpp's source from node-llama-cpp's bundle")
  endif()
endif()
