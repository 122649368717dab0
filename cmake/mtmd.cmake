# libmtmd, llama.cpp's multimodal library (the vision towers of mmproj files), compiled from the pinned bundle's
# source against the prebuilt libllama / libggml of node-llama-cpp (cmake/deps.cmake). The npm package ships
# no libmtmd, and building llama.cpp's own CMake tree would also rebuild libllama and ggml, which epd takes
# prebuilt. Static and position-independent: only the encoder's vision code (model/src/vision) links it.
#
#   epd::mtmd         mtmd.cpp, clip.cpp and every encoder graph (clip.cpp dispatches to all of them)
#   epd::mtmd_helper  mtmd-helper.cpp: image files and the llama_decode loop (the test oracle only; it
#                     carries stb_image's and miniaudio's implementations)
set(EPD_MTMD_SRC ${EPD_LLAMA_CPP_SRC}/tools/mtmd)
file(GLOB EPD_MTMD_GRAPHS CONFIGURE_DEPENDS ${EPD_MTMD_SRC}/models/*.cpp)

# The prebuilt libraries, by their SONAMEs, with an rpath to where they live.
foreach(lib llama ggml ggml_base)
  set(file libllama.${EPD_LLAMA_CPP_TAG}.so)
  if(lib STREQUAL "ggml")
    set(file libggml.${EPD_LLAMA_CPP_TAG}.so)
  elseif(lib STREQUAL "ggml_base")
    set(file libggml-base.so)
  endif()
  add_library(epd_prebuilt_${lib} SHARED IMPORTED GLOBAL)
  set_target_properties(epd_prebuilt_${lib} PROPERTIES IMPORTED_LOCATION ${EPD_GGML_DIR}/${file}
                                                       IMPORTED_NO_SONAME OFF)
endforeach()

add_library(epd_mtmd STATIC ${EPD_MTMD_SRC}/mtmd.cpp ${EPD_MTMD_SRC}/mtmd-image.cpp ${EPD_MTMD_SRC}/mtmd-audio.cpp
                            ${EPD_MTMD_SRC}/clip.cpp ${EPD_MTMD_GRAPHS} ${EPD_LLAMA_CPP_SRC}/vendor/hash/hash.cpp
                            ${EPD_LLAMA_CPP_SRC}/vendor/hash/xxhash/xxhash.c
                            ${EPD_LLAMA_CPP_SRC}/vendor/hash/sha256/sha256.c)
add_library(epd::mtmd ALIAS epd_mtmd)
# llama.cpp's code is held to its own warnings, not epd's; it is C++17 and takes no part in epd's sanitizer
# or unity settings.
target_compile_options(epd_mtmd PRIVATE -w -O2)
set_target_properties(epd_mtmd PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON UNITY_BUILD OFF)
target_include_directories(epd_mtmd SYSTEM PUBLIC ${EPD_MTMD_SRC} ${EPD_LLAMA_CPP_SRC}/include
                                                  ${EPD_LLAMA_CPP_SRC}/ggml/include)
target_include_directories(epd_mtmd PRIVATE ${EPD_LLAMA_CPP_SRC}/vendor ${EPD_LLAMA_CPP_SRC}/vendor/hash)
target_link_libraries(epd_mtmd PUBLIC epd_prebuilt_llama epd_prebuilt_ggml epd_prebuilt_ggml_base
                                      Threads::Threads)
target_link_options(epd_mtmd INTERFACE "LINKER:-rpath,${EPD_GGML_DIR}")

add_library(epd_mtmd_helper STATIC EXCLUDE_FROM_ALL ${EPD_MTMD_SRC}/mtmd-helper.cpp)
target_compile_options(epd_mtmd_helper PRIVATE -w -O2)
set_target_properties(epd_mtmd_helper PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON UNITY_BUILD OFF)
target_include_directories(epd_mtmd_helper PRIVATE ${EPD_LLAMA_CPP_SRC}/vendor)
target_link_libraries(epd_mtmd_helper PUBLIC epd_mtmd)
