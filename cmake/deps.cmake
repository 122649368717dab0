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
# libopenblas-dev: sgemm for the checkpoint runner's prefill (model/src/llama_model.cpp).
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
