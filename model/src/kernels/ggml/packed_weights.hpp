#pragma once
// The repacked copies of a GGUF file's matrices (ggml_cpu.hpp, Packing), kept where every role on the host
// maps the same pages: a cache file per (model file, CPU variant) that the first process to load the model
// writes and the others map read-only. llama.cpp repacks into private memory in every process; a prefill and
// a decode of the same model would then hold two copies.
//
// The file is written under an exclusive lock to a temporary name and renamed into place when complete, so
// a reader sees either no file or a whole one. It is found again by a name derived from the model file's
// identity (path, device, inode, size, modification time), the library's tag and variant and the packings,
// and that identity is stored in its header and compared in full before a byte of it is used. Without a
// usable cache directory the copies go to private memory (correct, not shared); `where()` says which.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "epd/model/tensor.hpp"
#include "epd/protocol/result.hpp"
#include "kernels/ggml/ggml_cpu.hpp"

namespace epd::model::ggml {

class PackedWeights {
 public:
  struct Matrix {
    const TensorRef* tensor;  // rows x cols, in the mapped model file
    Packing packing;
  };
  // `model_path` is the file the tensors are mapped from; `cache_dir` empty means private memory.
  static protocol::Result<std::shared_ptr<const PackedWeights>> build(const std::string& model_path,
                                                                      std::span<const Matrix> matrices,
                                                                      const Library& lib,
                                                                      const std::string& cache_dir);
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  // Matrix i's repacked bytes (as many as the original) and the kernels that read them.
  const std::byte* data(size_t i) const { return base_ + offsets_[i]; }
  const Packing& packing(size_t i) const { return packings_[i]; }
  // The cache file mapped, or why the copies are private ("private memory: <reason>").
  const std::string& where() const { return where_; }
  bool shared() const { return shared_; }

  // The cache directory: $EPD_CACHE_DIR, else $XDG_CACHE_HOME/epd, else $HOME/.cache/epd; empty if none.
  static std::string default_cache_dir();

 private:
  PackedWeights() = default;
  const std::byte* base_ = nullptr;
  size_t size_ = 0;
  bool shared_ = false;
  std::vector<size_t> offsets_;
  std::vector<Packing> packings_;
  std::vector<std::byte> private_;  // when not shared
  std::string where_;
};

}  // namespace epd::model::ggml
