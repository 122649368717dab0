#include "epd/model/safetensors.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace epd::model {
namespace {

using nlohmann::json;
using protocol::ErrorCode;
using protocol::make_error;

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit (100 MB of JSON)
constexpr size_t kMaxRank = 8;

protocol::Error bad(const std::string& file, const std::string& detail) {
  return make_error(ErrorCode::config_error, "safetensors " + file + ": " + detail);
}

bool dtype_from_name(const std::string& s, TensorType& out) {
  if (s == "F32")
    out = TensorType::f32;
  else if (s == "F16")
    out = TensorType::f16;
  else if (s == "BF16")
    out = TensorType::bf16;
  else
    return false;
  return true;
}

bool read_u64(const json& j, uint64_t& out) {
  if (!j.is_number_unsigned()) return false;
  out = j.get<uint64_t>();
  return true;
}

}  // namespace

protocol::Status SafetensorsCheckpoint::add_file(std::span<const std::byte> bytes, const std::string& name,
                                                 const std::vector<std::string>* only) {
  uint64_t header_len = 0;
  if (bytes.size() < 8) return bad(name, "truncated: shorter than its 8-byte header length");
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > kMaxHeader) return bad(name, "header length " + std::to_string(header_len) + " too large");
  if (header_len > bytes.size() - 8)
    return bad(name, "truncated: header of " + std::to_string(header_len) + " bytes in a " +
                         std::to_string(bytes.size()) + "-byte file");
  const auto* h = reinterpret_cast<const char*>(bytes.data() + 8);
  const json header = json::parse(h, h + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad(name, "header is not a JSON object");
  const std::span<const std::byte> data = bytes.subspan(8 + header_len);

  for (const auto& [key, entry] : header.items()) {
    if (key == "__metadata__") continue;
    if (only && std::find(only->begin(), only->end(), key) == only->end()) continue;
    if (!entry.is_object()) return bad(name, "entry " + key + " is not an object");
    TensorRef t;
    t.name = key;
    const auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) return bad(name, "tensor " + key + " has no dtype");
    if (!dtype_from_name(dt->get<std::string>(), t.type))
      return bad(name, "tensor " + key + " has unsupported dtype " + dt->get<std::string>() +
                           " (supported: F32, F16, BF16)");
    const auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array() || sh->size() > kMaxRank)
      return bad(name, "tensor " + key + " has no valid shape");
    for (const json& d : *sh) {
      uint64_t v = 0;
      if (!read_u64(d, v)) return bad(name, "tensor " + key + " has a non-integer dimension");
      t.shape.push_back(v);
    }
    const uint64_t size = tensor_bytes(t.type, t.shape);
    if (size == 0) return bad(name, "tensor " + key + " has an empty or overflowing shape");
    const auto off = entry.find("data_offsets");
    uint64_t begin = 0, end = 0;
    if (off == entry.end() || !off->is_array() || off->size() != 2 || !read_u64((*off)[0], begin) ||
        !read_u64((*off)[1], end) || begin > end)
      return bad(name, "tensor " + key + " has no valid data_offsets");
    if (end - begin != size)
      return bad(name, "tensor " + key + " spans " + std::to_string(end - begin) +
                           " bytes, its shape needs " + std::to_string(size));
    if (end > data.size())
      return bad(name, "truncated: tensor " + key + " ends at data byte " + std::to_string(end) + " of " +
                           std::to_string(data.size()));
    t.bytes = data.subspan(begin, size);
    if (!tensors_.emplace(key, std::move(t)).second) return bad(name, "tensor " + key + " appears twice");
  }
  return {};
}

protocol::Result<SafetensorsCheckpoint> SafetensorsCheckpoint::parse(std::span<const std::byte> bytes,
                                                                     std::string name) {
  SafetensorsCheckpoint c;
  if (auto st = c.add_file(bytes, name, nullptr); !st) return st.error();
  return c;
}

protocol::Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& path) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint c;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    auto f = MappedFile::open(path);
    if (!f) return f.error();
    if (auto st = c.add_file(f->bytes(), path, nullptr); !st) return st.error();
    c.files_.push_back(std::move(*f));
    return c;
  }
  const fs::path dir(path);
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index, ec)) {
    const fs::path single = dir / "model.safetensors";
    if (!fs::exists(single, ec))
      return bad(path, "directory has neither model.safetensors.index.json nor model.safetensors");
    return open(single.string());
  }
  std::ifstream in(index, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) return make_error(ErrorCode::io_error, "cannot read " + index.string());
  const json j = json::parse(ss.str(), nullptr, false);
  const auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (wm == j.end() || !wm->is_object()) return bad(index.string(), "no weight_map object");
  // Shard file -> the tensors the index puts there (each tensor is taken from the shard the index names).
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string()) return bad(index.string(), "weight_map entry " + tensor + " is not a file name");
    const std::string f = file.get<std::string>();
    // Shards are files of this directory: a name with a path component could point anywhere.
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      return bad(index.string(), "shard name '" + f + "' is not a plain file name");
    shards[f].push_back(tensor);
  }
  for (const auto& [file, names] : shards) {
    auto f = MappedFile::open((dir / file).string());
    if (!f) return f.error();
    const size_t before = c.tensors_.size();
    if (auto st = c.add_file(f->bytes(), f->path(), &names); !st) return st.error();
    if (c.tensors_.size() - before != names.size()) {
      for (const auto& n : names)
        if (!c.tensors_.count(n))
          return bad(f->path(), "tensor " + n + " listed by the index is not in this shard");
    }
    c.files_.push_back(std::move(*f));
  }
  return c;
}

const TensorRef* SafetensorsCheckpoint::tensor(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace epd::model
