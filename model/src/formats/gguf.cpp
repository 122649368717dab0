#include "epd/model/gguf.hpp"

#include <cstring>
#include <limits>

namespace epd::model {
namespace {

using protocol::ErrorCode;
using protocol::make_error;

// Bounds that keep a hostile header from asking for absurd allocations before the bytes are checked.
constexpr uint64_t kMaxTensors = 1u << 20;
constexpr uint64_t kMaxKeys = 1u << 20;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Sequential reads over the mapping; every read checks the bytes left first.
class Cursor {
 public:
  Cursor(std::span<const std::byte> b, std::string& err) : b_(b), err_(err) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return b_.size() - pos_; }

  template <class T>
  bool read(T& out, const char* what) {
    if (left() < sizeof(T)) return truncated(what);
    std::memcpy(&out, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool str(std::string& out, const char* what) {
    uint64_t n = 0;
    if (!read(n, what)) return false;
    if (n > left()) return truncated(what);
    out.assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool truncated(const char* what) {
    err_ = std::string("truncated at byte ") + std::to_string(pos_) + " reading " + what;
    return false;
  }
  bool fail(std::string msg) {
    err_ = std::move(msg);
    return false;
  }

 private:
  std::span<const std::byte> b_;
  uint64_t pos_ = 0;
  std::string& err_;
};

// Size in the file of one scalar of type t (0 for string/array/unknown).
uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::boolean:
      return 1;
    case GgufType::u16:
    case GgufType::i16:
      return 2;
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::f32:
      return 4;
    case GgufType::u64:
    case GgufType::i64:
    case GgufType::f64:
      return 8;
    default:
      return 0;
  }
}

bool known_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::f64);
}

// Reads one scalar into (i, u, f); false on truncation or a bool that is not 0/1.
bool read_scalar(Cursor& c, GgufType t, int64_t& i, uint64_t& u, double& f) {
  auto get = [&](auto v) {
    if (!c.read(v, "a metadata value")) return false;
    if constexpr (std::is_floating_point_v<decltype(v)>) {
      f = v;
    } else if constexpr (std::is_unsigned_v<decltype(v)>) {
      u = v;
      i = v > uint64_t(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                            : static_cast<int64_t>(v);
    } else {
      i = v;
      u = static_cast<uint64_t>(v);
    }
    return true;
  };
  switch (t) {
    case GgufType::u8:
      return get(uint8_t{});
    case GgufType::i8:
      return get(int8_t{});
    case GgufType::u16:
      return get(uint16_t{});
    case GgufType::i16:
      return get(int16_t{});
    case GgufType::u32:
      return get(uint32_t{});
    case GgufType::i32:
      return get(int32_t{});
    case GgufType::u64:
      return get(uint64_t{});
    case GgufType::i64:
      return get(int64_t{});
    case GgufType::f32:
      return get(float{});
    case GgufType::f64:
      return get(double{});
    case GgufType::boolean: {
      uint8_t b = 0;
      if (!c.read(b, "a bool")) return false;
      if (b > 1) return c.fail("bool value " + std::to_string(b) + " is not 0 or 1");
      i = b;
      u = b;
      return true;
    }
    default:
      return false;
  }
}

bool read_value(Cursor& c, GgufValue& v, const std::string& key) {
  if (v.type == GgufType::string) return c.str(v.s, "a string value");
  if (v.type != GgufType::array) return read_scalar(c, v.type, v.i, v.u, v.f);
  uint32_t et = 0;
  uint64_t n = 0;
  if (!c.read(et, "an array type") || !c.read(n, "an array length")) return false;
  if (!known_type(et)) return c.fail("key " + key + ": unknown array element type " + std::to_string(et));
  v.elem = static_cast<GgufType>(et);
  if (v.elem == GgufType::array) return c.fail("key " + key + ": nested arrays are not supported");
  // Every element takes at least its scalar size (a string at least its 8-byte length): check before
  // reserving.
  const uint64_t min_size = v.elem == GgufType::string ? 8 : scalar_size(v.elem);
  if (n > c.left() / min_size) return c.truncated("an array");
  if (v.elem == GgufType::string) {
    v.strings.resize(n);
    for (auto& s : v.strings)
      if (!c.str(s, "an array string")) return false;
    return true;
  }
  const bool fl = v.elem == GgufType::f32 || v.elem == GgufType::f64;
  (fl ? v.floats.reserve(n) : v.ints.reserve(n));
  for (uint64_t k = 0; k < n; ++k) {
    int64_t i = 0;
    uint64_t u = 0;
    double f = 0;
    if (!read_scalar(c, v.elem, i, u, f)) return false;
    if (fl)
      v.floats.push_back(f);
    else
      v.ints.push_back(i);
  }
  return true;
}

}  // namespace

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::u16:
    case GgufType::i16:
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::u64:
    case GgufType::i64:
      return true;
    default:
      return false;
  }
}

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                               "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(names) ? names[i] : "unknown";
}

protocol::Result<GgufFile> GgufFile::open(const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return file.error();
  const auto bytes = file->bytes();
  auto parsed = parse(bytes, path);
  if (!parsed) return parsed.error();
  parsed->file_ = std::move(*file);  // the spans point into the mapping, which does not move
  return parsed;
}

protocol::Result<GgufFile> GgufFile::parse(std::span<const std::byte> bytes, std::string name) {
  std::string err;
  Cursor c(bytes, err);
  GgufFile g;
  g.name_ = name;
  auto bad = [&](std::string detail) {
    return make_error(ErrorCode::config_error, "GGUF " + name + ": " + detail);
  };
  char magic[4] = {};
  if (!c.read(magic, "the magic")) return bad(err);
  if (std::memcmp(magic, "GGUF", 4) != 0) return bad("not a GGUF file (bad magic)");
  uint64_t n_tensors = 0, n_kv = 0;
  if (!c.read(g.version_, "the version")) return bad(err);
  if (g.version_ != 2 && g.version_ != 3)
    return bad("unsupported GGUF version " + std::to_string(g.version_) + " (supported: 2, 3)");
  if (!c.read(n_tensors, "the tensor count") || !c.read(n_kv, "the metadata count")) return bad(err);
  if (n_tensors > kMaxTensors) return bad("tensor count " + std::to_string(n_tensors) + " too large");
  if (n_kv > kMaxKeys) return bad("metadata count " + std::to_string(n_kv) + " too large");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    uint32_t type = 0;
    if (!c.str(key, "a metadata key") || !c.read(type, "a metadata type")) return bad(err);
    if (!known_type(type)) return bad("key " + key + ": unknown value type " + std::to_string(type));
    GgufValue v;
    v.type = static_cast<GgufType>(type);
    if (!read_value(c, v, key)) return bad(err);
    if (!g.kv_.emplace(key, std::move(v)).second) return bad("duplicate metadata key " + key);
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    if (a->type != GgufType::u32 || a->u == 0 || (a->u & (a->u - 1)) != 0)
      return bad("general.alignment must be a u32 power of two");
    g.alignment_ = static_cast<uint32_t>(a->u);
  }

  struct Info {
    uint64_t offset;
  };
  std::vector<Info> infos;
  if (n_tensors > c.left() / 24) return bad("truncated: " + std::to_string(n_tensors) + " tensor infos");
  infos.reserve(n_tensors);
  g.tensors_.reserve(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    TensorRef ref;
    uint32_t n_dims = 0, type = 0;
    if (!c.str(ref.name, "a tensor name") || !c.read(n_dims, "a tensor's dimension count")) return bad(err);
    if (n_dims == 0 || n_dims > kMaxDims)
      return bad("tensor " + ref.name + " has " + std::to_string(n_dims) + " dimensions (1..4)");
    ref.shape.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d)
      if (!c.read(ref.shape[n_dims - 1 - d], "a tensor dimension")) return bad(err);  // ggml order reversed
    Info info{};
    if (!c.read(type, "a tensor type") || !c.read(info.offset, "a tensor offset")) return bad(err);
    const auto known = tensor_type_from_ggml(type);
    if (!known)
      return bad("tensor " + ref.name + " has unsupported ggml type " + std::to_string(type) +
                 " (supported: " + supported_tensor_types() + ")");
    ref.type = *known;
    if (tensor_bytes(ref.type, ref.shape) == 0)
      return bad("tensor " + ref.name + " has an invalid shape for " +
                 std::string(tensor_type_name(ref.type)) +
                 " (zero or overflowing dimension, or a row that is not a multiple of " +
                 std::to_string(tensor_type_info(ref.type).block_elements) + ")");
    if (info.offset % g.alignment_ != 0)
      return bad("tensor " + ref.name + " offset " + std::to_string(info.offset) + " is not aligned to " +
                 std::to_string(g.alignment_));
    if (!g.by_name_.emplace(ref.name, g.tensors_.size()).second) return bad("duplicate tensor " + ref.name);
    g.tensors_.push_back(std::move(ref));
    infos.push_back(info);
  }
  const uint64_t data_start = (c.pos() + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  if (n_tensors > 0 && data_start > bytes.size()) return bad("truncated before the tensor data");
  for (size_t t = 0; t < g.tensors_.size(); ++t) {
    TensorRef& ref = g.tensors_[t];
    const uint64_t size = tensor_bytes(ref.type, ref.shape);
    const uint64_t avail = bytes.size() - data_start;
    if (infos[t].offset > avail || size > avail - infos[t].offset)
      return bad("truncated: tensor " + ref.name + " needs bytes up to " +
                 std::to_string(data_start + infos[t].offset + size) + " of a " +
                 std::to_string(bytes.size()) + "-byte file");
    ref.bytes = bytes.subspan(data_start + infos[t].offset, size);
  }
  return g;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_.find(std::string(key));
  return it == kv_.end() ? nullptr : &it->second;
}

protocol::Result<std::optional<uint64_t>> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<uint64_t>{};
  if (!v->is_integer() || (v->i < 0 && v->type != GgufType::u64))
    return make_error(ErrorCode::config_error, "GGUF " + name_ + ": key " + std::string(key) +
                                                   " must be a non-negative integer, is " +
                                                   std::string(gguf_type_name(v->type)));
  return std::optional<uint64_t>{v->u};
}

protocol::Result<std::optional<double>> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<double>{};
  if (!v->is_float())
    return make_error(ErrorCode::config_error, "GGUF " + name_ + ": key " + std::string(key) +
                                                   " must be a float, is " +
                                                   std::string(gguf_type_name(v->type)));
  return std::optional<double>{v->f};
}

protocol::Result<std::optional<std::string>> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::optional<std::string>{};
  if (v->type != GgufType::string)
    return make_error(ErrorCode::config_error, "GGUF " + name_ + ": key " + std::string(key) +
                                                   " must be a string, is " +
                                                   std::string(gguf_type_name(v->type)));
  return std::optional<std::string>{v->s};
}

const TensorRef* GgufFile::tensor(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace epd::model
