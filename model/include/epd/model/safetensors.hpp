#pragma once
// Hugging Face safetensors, read in place from memory mappings: one `*.safetensors` file, or a checkpoint
// directory holding `model.safetensors` or shards listed by `model.safetensors.index.json`. Each file is an
// 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}} and the data.
// Offsets, sizes and shapes are checked against the file before use; dtypes F32, F16, BF16.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "epd/model/mapped_file.hpp"
#include "epd/model/tensor.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

class SafetensorsCheckpoint {
 public:
  // A directory (index file if present, else model.safetensors) or one .safetensors file.
  static protocol::Result<SafetensorsCheckpoint> open(const std::string& path);
  // One file's bytes, kept alive by the caller (fuzz target, tests).
  static protocol::Result<SafetensorsCheckpoint> parse(std::span<const std::byte> bytes,
                                                       std::string name = "<memory>");

  const TensorRef* tensor(std::string_view name) const;
  const std::map<std::string, TensorRef, std::less<>>& tensors() const { return tensors_; }
  size_t shard_count() const { return files_.size(); }

 private:
  protocol::Status add_file(std::span<const std::byte> bytes, const std::string& name,
                            const std::vector<std::string>* only);
  std::vector<MappedFile> files_;
  std::map<std::string, TensorRef, std::less<>> tensors_;
};

}  // namespace epd::model
