// Parses and validates GGUF v2/v3 (gguf_reader.h). The checks follow ggml's src/gguf.cpp; where
// 1bit is stricter or looser it says so in docs/gguf.md. Every size is checked before it is used.
#include "gguf/gguf_reader.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "base/check.h"
#include "base/checked_math.h"

namespace onebit {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;                  // key length, 1-byte key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, ne[0], type, offset
constexpr uint64_t kMinNestedArrayBytes = 4 + 8;                 // element type, count
constexpr uint32_t kNumValueTypes = 13;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string num(uint64_t v) { return std::to_string(v); }

// A name from the file, safe to print: non-printable bytes as \xNN, cut at 80 bytes.
std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > 80) out += "...";
  return out;
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof(buf), "%s%02x", i ? " " : "", p[i]);
    out += buf;
  }
  return out;
}

bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8: case GgufValueType::kInt8: case GgufValueType::kUint16:
    case GgufValueType::kInt16: case GgufValueType::kUint32: case GgufValueType::kInt32:
    case GgufValueType::kUint64: case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(GgufValueType t) {
  return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64;
}

// Integer (or bool) element at p, sign- or zero-extended; u64 values above 2^63 wrap.
int64_t load_int(GgufValueType t, const uint8_t* p) {
  switch (t) {
    case GgufValueType::kUint8: return load<uint8_t>(p);
    case GgufValueType::kInt8: return load<int8_t>(p);
    case GgufValueType::kUint16: return load<uint16_t>(p);
    case GgufValueType::kInt16: return load<int16_t>(p);
    case GgufValueType::kUint32: return load<uint32_t>(p);
    case GgufValueType::kInt32: return load<int32_t>(p);
    case GgufValueType::kUint64: return static_cast<int64_t>(load<uint64_t>(p));
    case GgufValueType::kInt64: return load<int64_t>(p);
    case GgufValueType::kBool: return load<uint8_t>(p) != 0;
    default: ONEBIT_CHECK_MSG(false, "load_int on a non-integer type");
  }
  return 0;
}

double load_float(GgufValueType t, const uint8_t* p) {
  if (t == GgufValueType::kFloat32) return load<float>(p);
  if (t == GgufValueType::kFloat64) return load<double>(p);
  if (t == GgufValueType::kUint64) return static_cast<double>(load<uint64_t>(p));
  return static_cast<double>(load_int(t, p));
}

std::string describe_type(const GgufValue& v) {
  if (v.type != GgufValueType::kArray) return std::string(gguf_value_type_name(v.type));
  return "array of " + std::string(gguf_value_type_name(v.array_type));
}

}  // namespace

std::string_view gguf_value_type_name(GgufValueType t) {
  static constexpr std::string_view kNames[kNumValueTypes] = {
      "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
      "bool", "string", "array", "uint64", "int64", "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < kNumValueTypes ? kNames[i] : std::string_view("unknown");
}

size_t gguf_value_type_size(GgufValueType t) {
  static constexpr size_t kSizes[kNumValueTypes] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  const auto i = static_cast<uint32_t>(t);
  return i < kNumValueTypes ? kSizes[i] : 0;
}

bool gguf_value_type_known(uint32_t raw) { return raw < kNumValueTypes; }

// Walks the buffer once, front to back; each read checks the bytes left first.
class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, GgufFile& out)
      : p_(bytes.data()), size_(bytes.size()), out_(out) {}

  Status parse() {
    uint64_t n_tensors = 0, n_kv = 0;
    ONEBIT_TRY(parse_header(n_tensors, n_kv));
    out_.kv_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) ONEBIT_TRY(parse_kv(i));
    ONEBIT_TRY(parse_alignment());
    out_.tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) ONEBIT_TRY(parse_tensor_info(i));
    const uint64_t data_offset = *checked_align_up(pos_, out_.alignment_);  // pos_ <= size_
    out_.data_offset_ = (n_tensors == 0) ? std::min<uint64_t>(data_offset, size_) : data_offset;
    for (auto& t : out_.tensors_) ONEBIT_TRY(check_tensor(t));
    return check_overlaps();
  }

 private:
  Error fail(const std::string& msg) const { return make_error("gguf: " + out_.name_ + ": " + msg); }
  uint64_t remaining() const { return size_ - pos_; }
  Error truncated(const std::string& what, uint64_t n) const {
    return fail(what + " needs " + num(n) + " bytes at byte " + num(pos_) + " but the file ends at byte " +
                num(size_) + " (truncated file?)");
  }
  template <typename T>
  bool take(T& v) {
    if (remaining() < sizeof(T)) return false;
    v = load<T>(p_ + pos_);
    pos_ += sizeof(T);
    return true;
  }
  // Checks that `n` items of at least `min_bytes` each can fit in what is left of the file.
  Status check_count(const std::string& what, uint64_t n, uint64_t min_bytes) const {
    auto need = checked_mul(n, min_bytes);
    if (need && *need <= remaining()) return ok_status();
    return fail(what + " = " + num(n) + " is implausible: that many need at least " +
                (need ? num(*need) : std::string("2^64")) + " bytes at byte " + num(pos_) + " but only " +
                num(remaining()) + " remain (file is " + num(size_) + " bytes)");
  }

  Status read_string(std::string_view& s, const std::string& what) {
    uint64_t len = 0;
    if (!take(len)) return truncated(what + " length", 8);
    if (len > remaining()) {
      return fail(what + ": length " + num(len) + " at byte " + num(pos_ - 8) +
                  " runs past the end of the file (" + num(size_) + " bytes)");
    }
    s = std::string_view(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return ok_status();
  }

  Status parse_header(uint64_t& n_tensors, uint64_t& n_kv) {
    if (size_ < 4) {
      return fail("file is " + num(size_) + " bytes; a GGUF file starts with the 4-byte magic 'GGUF'");
    }
    if (std::memcmp(p_, "GGUF", 4) != 0) {
      return fail("magic is '" + printable({reinterpret_cast<const char*>(p_), 4}) + "' (bytes " +
                  hex_bytes(p_, 4) + "), expected 'GGUF' (47 47 55 46): not a GGUF file");
    }
    pos_ = 4;
    uint32_t version = 0;
    if (!take(version)) return truncated("header version", 4);
    if (version != 0 && (version & 0xFFFFu) == 0) {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "0x%08x", version);
      return fail(std::string("version reads ") + buf +
                  ", a byte-swapped small number: the file is big-endian; 1bit reads only "
                  "little-endian GGUF (convert it again without --bigendian)");
    }
    if (version == 1) {
      return fail("version 1 is not supported (1bit reads GGUF versions 2 and 3); convert the model "
                  "again with a current llama.cpp");
    }
    if (version != 2 && version != 3) {
      return fail("version " + num(version) + " is not supported (1bit reads GGUF versions 2 and 3)");
    }
    out_.version_ = version;
    if (!take(n_tensors)) return truncated("header n_tensors", 8);
    if (!take(n_kv)) return truncated("header n_kv", 8);
    ONEBIT_TRY(check_count("header n_kv", n_kv, kMinKvBytes));
    ONEBIT_TRY(check_count("header n_tensors", n_tensors, kMinTensorInfoBytes));
    auto both = checked_add(n_kv * kMinKvBytes, n_tensors * kMinTensorInfoBytes);
    if (!both || *both > remaining()) {
      return fail("header n_kv = " + num(n_kv) + " and n_tensors = " + num(n_tensors) +
                  " are implausible: together they need more than the " + num(remaining()) +
                  " bytes left (file is " + num(size_) + " bytes)");
    }
    return ok_status();
  }

  Status parse_kv(uint64_t idx) {
    std::string where = "kv " + num(idx);
    std::string_view key;
    ONEBIT_TRY(read_string(key, where + " key"));
    if (key.empty()) return fail(where + ": key is empty; every metadata key needs a name");
    if (key.size() > kGgufMaxKeyBytes) {
      return fail(where + ": key is " + num(key.size()) + " bytes; the spec allows at most 65535");
    }
    for (size_t i = 0; i < key.size(); ++i) {
      const auto c = static_cast<unsigned char>(key[i]);
      if (c < 0x20 || c >= 0x7f) {
        return fail(where + ": key '" + printable(key) + "' has byte " + hex_bytes(&c, 1) + " at position " +
                    num(i) + "; keys must be printable ASCII");
      }
    }
    where = "kv " + num(idx) + " '" + std::string(key) + "'";
    auto [it, inserted] = keys_.emplace(key, idx);
    if (!inserted) return fail(where + ": duplicate key (first defined by kv " + num(it->second) + ")");
    uint32_t raw_type = 0;
    if (!take(raw_type)) return truncated(where + " value type", 4);
    if (!gguf_value_type_known(raw_type)) {
      return fail(where + ": unknown value type " + num(raw_type) + " (GGUF types are 0 to 12)");
    }
    GgufKeyValue kv;
    kv.key = key;
    ONEBIT_TRY(parse_value(static_cast<GgufValueType>(raw_type), kv.value, 0, where));
    out_.kv_.push_back(std::move(kv));
    return ok_status();
  }

  Status parse_value(GgufValueType t, GgufValue& v, int depth, const std::string& where) {
    v.type = t;
    if (t == GgufValueType::kString) return read_string(v.str, where + " string");
    if (t == GgufValueType::kArray) return parse_array(v, depth, where);
    const size_t n = gguf_value_type_size(t);
    if (remaining() < n) return truncated(where + " value (" + std::string(gguf_value_type_name(t)) + ")", n);
    v.raw = {p_ + pos_, n};
    pos_ += n;
    return ok_status();
  }

  Status parse_array(GgufValue& v, int depth, const std::string& where) {
    if (depth >= kGgufMaxArrayDepth) {
      return fail(where + ": arrays nested more than " + num(kGgufMaxArrayDepth) + " deep are refused");
    }
    uint32_t raw_type = 0;
    if (!take(raw_type)) return truncated(where + " array element type", 4);
    if (!gguf_value_type_known(raw_type)) {
      return fail(where + ": array has unknown element type " + num(raw_type) + " (GGUF types are 0 to 12)");
    }
    const auto et = static_cast<GgufValueType>(raw_type);
    uint64_t n = 0;
    if (!take(n)) return truncated(where + " array length", 8);
    v.array_type = et;
    v.array_count = n;
    const uint64_t start = pos_;
    const std::string what = where + " array length";
    if (et == GgufValueType::kString) {
      ONEBIT_TRY(check_count(what + " (of strings)", n, 8));
      v.strings.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t len = 0;
        if (!take(len)) return truncated(where + " string " + num(i) + " of " + num(n) + " length", 8);
        if (len > remaining()) {
          return fail(where + " string " + num(i) + " of " + num(n) + ": length " + num(len) + " at byte " +
                      num(pos_ - 8) + " runs past the end of the file (" + num(size_) + " bytes)");
        }
        v.strings.emplace_back(reinterpret_cast<const char*>(p_ + pos_), len);
        pos_ += len;
      }
    } else if (et == GgufValueType::kArray) {
      ONEBIT_TRY(check_count(what + " (of arrays)", n, kMinNestedArrayBytes));
      if (n > kGgufMaxNestedElements - nested_elements_) {
        return fail(where + ": nested arrays hold more than " + num(kGgufMaxNestedElements) +
                    " elements in all; 1bit refuses them");
      }
      nested_elements_ += n;
      v.array_nested.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        v.array_nested[i].type = GgufValueType::kArray;
        ONEBIT_TRY(parse_array(v.array_nested[i], depth + 1, where + "[" + num(i) + "]"));
      }
    } else {
      ONEBIT_TRY(check_count(what + " (of " + std::string(gguf_value_type_name(et)) + ")", n,
                             gguf_value_type_size(et)));
      pos_ += n * gguf_value_type_size(et);
    }
    v.raw = {p_ + start, pos_ - start};
    return ok_status();
  }

  // general.alignment: ggml requires a uint32 power of two; the default is 32.
  Status parse_alignment() {
    const GgufValue* v = out_.find("general.alignment");
    if (v == nullptr) return ok_status();
    if (v->type != GgufValueType::kUint32) {
      return fail("kv 'general.alignment' has type " + describe_type(*v) + "; it must be uint32");
    }
    const uint32_t a = load<uint32_t>(v->raw.data());
    if (a == 0 || !std::has_single_bit(a)) {
      return fail("kv 'general.alignment' = " + num(a) + "; it must be a power of two greater than 0");
    }
    out_.alignment_ = a;
    return ok_status();
  }

  Status parse_tensor_info(uint64_t idx) {
    std::string where = "tensor " + num(idx);
    GgufTensorInfo t;
    ONEBIT_TRY(read_string(t.name, where + " name"));
    if (t.name.empty()) return fail(where + ": name is empty");
    if (t.name.size() > kGgufMaxTensorNameBytes) {
      return fail(where + ": name '" + printable(t.name) + "' is " + num(t.name.size()) +
                  " bytes; ggml allows at most " + num(kGgufMaxTensorNameBytes));
    }
    where = "tensor '" + printable(t.name) + "'";
    auto [it, inserted] = tensor_names_.emplace(t.name, idx);
    if (!inserted) return fail(where + ": duplicate tensor name (first defined by tensor " + num(it->second) + ")");
    if (!take(t.n_dims)) return truncated(where + " n_dims", 4);
    if (t.n_dims == 0 || t.n_dims > kGgufMaxDims) {
      return fail(where + ": n_dims = " + num(t.n_dims) + "; it must be 1 to " + num(kGgufMaxDims));
    }
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      const std::string dim = "ne[" + num(d) + "]";
      if (!take(t.ne[d])) return truncated(where + " " + dim, 8);
      if (t.ne[d] == 0) return fail(where + ": " + dim + " = 0; every dimension must be at least 1");
      if (t.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail(where + ": " + dim + " = " + num(t.ne[d]) + " exceeds the int64 range ggml uses");
      }
    }
    if (!take(t.raw_type)) return truncated(where + " type", 4);
    if (!take(t.offset)) return truncated(where + " offset", 8);
    out_.tensors_.push_back(t);
    return ok_status();
  }

  // Type, element count, byte size, alignment and bounds of one tensor; sets n_bytes and data.
  Status check_tensor(GgufTensorInfo& t) {
    const std::string where = "tensor '" + printable(t.name) + "'";
    const auto traits = ggml_type_traits(t.raw_type);
    if (!traits) {
      return fail(where + ": unknown tensor type " + num(t.raw_type) +
                  " (not a ggml type 1bit knows; see docs/gguf.md)");
    }
    std::optional<uint64_t> n = 1;
    std::string dims;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      dims += (d ? ", " : "") + num(t.ne[d]);
      if (n) n = checked_mul(*n, t.ne[d]);
    }
    if (!n || *n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return fail(where + ": dimensions [" + dims + "] hold more than 2^63 elements");
    }
    t.n_elements = *n;
    if (t.ne[0] % traits->block_elems != 0) {
      return fail(where + ": ne[0] = " + num(t.ne[0]) + " is not a multiple of the " +
                  std::string(traits->name) + " block size " + num(traits->block_elems));
    }
    auto bytes = checked_mul(t.n_elements / traits->block_elems, traits->block_bytes);
    if (!bytes) return fail(where + ": dimensions [" + dims + "] of " + std::string(traits->name) + " overflow 2^64 bytes");
    t.n_bytes = *bytes;
    if (t.offset % out_.alignment_ != 0) {
      return fail(where + ": offset " + num(t.offset) + " is not a multiple of the alignment " +
                  num(out_.alignment_));
    }
    auto begin = checked_add(out_.data_offset_, t.offset);
    auto end = begin ? checked_add(*begin, t.n_bytes) : std::nullopt;
    if (!end || *end > size_) {
      return fail(where + ": offset " + num(t.offset) + " + " + num(t.n_bytes) +
                  " bytes runs past the end of the file (" + num(size_) + " bytes, data section at byte " +
                  num(out_.data_offset_) + ")");
    }
    t.data = p_ + *begin;
    return ok_status();
  }

  Status check_overlaps() const {
    const auto& ts = out_.tensors_;
    std::vector<size_t> order(ts.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ts[a].offset < ts[b].offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const auto& prev = ts[order[i - 1]];
      const auto& cur = ts[order[i]];
      if (cur.offset < prev.offset + prev.n_bytes) {  // both were bounded by the file size
        return fail("tensor '" + printable(cur.name) + "' (offset " + num(cur.offset) + ", " + num(cur.n_bytes) +
                    " bytes) overlaps tensor '" + printable(prev.name) + "' (offset " + num(prev.offset) +
                    ", " + num(prev.n_bytes) + " bytes)");
      }
    }
    return ok_status();
  }

  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t nested_elements_ = 0;  // across the whole file, <= kGgufMaxNestedElements
  GgufFile& out_;
  std::unordered_map<std::string_view, uint64_t> keys_;
  std::unordered_map<std::string_view, uint64_t> tensor_names_;
};

Result<GgufFile> GgufFile::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped.ok()) return with_context("gguf", mapped.error());
  GgufFile f;
  f.map_ = std::make_shared<MappedFile>(std::move(mapped).value());
  f.name_ = path;
  f.bytes_ = {f.map_->data(), f.map_->size()};
  ONEBIT_TRY(GgufParser(f.bytes_, f).parse());
  return f;
}

Result<GgufFile> GgufFile::from_memory(std::span<const uint8_t> bytes, std::string name) {
  GgufFile f;
  f.name_ = std::move(name);
  f.bytes_ = bytes;
  ONEBIT_TRY(GgufParser(f.bytes_, f).parse());
  return f;
}

// ---- Value accessors (CHECK on misuse: callers test the type first) ----

bool GgufValue::is_integer() const { return is_integer_type(type); }
bool GgufValue::is_float() const { return is_float_type(type); }

int64_t GgufValue::as_int() const {
  ONEBIT_CHECK(is_integer() || type == GgufValueType::kBool);
  return load_int(type, raw.data());
}

uint64_t GgufValue::as_uint() const {
  ONEBIT_CHECK(is_integer() || type == GgufValueType::kBool);
  return type == GgufValueType::kUint64 ? load<uint64_t>(raw.data()) : static_cast<uint64_t>(as_int());
}

double GgufValue::as_float() const {
  ONEBIT_CHECK(is_integer() || is_float());
  return load_float(type, raw.data());
}

bool GgufValue::as_bool() const {
  ONEBIT_CHECK(type == GgufValueType::kBool);
  return raw[0] != 0;
}

int64_t GgufValue::array_int(uint64_t i) const {
  ONEBIT_CHECK(type == GgufValueType::kArray && i < array_count);
  ONEBIT_CHECK(is_integer_type(array_type) || array_type == GgufValueType::kBool);
  return load_int(array_type, raw.data() + i * gguf_value_type_size(array_type));
}

double GgufValue::array_float(uint64_t i) const {
  ONEBIT_CHECK(type == GgufValueType::kArray && i < array_count);
  ONEBIT_CHECK(is_integer_type(array_type) || is_float_type(array_type));
  return load_float(array_type, raw.data() + i * gguf_value_type_size(array_type));
}

// ---- Lookup and typed getters ----

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& kv : kv_)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

Error key_error(const std::string& file, std::string_view key, const std::string& msg) {
  return make_error("gguf: " + file + ": metadata key '" + std::string(key) + "' " + msg);
}

Result<const GgufValue*> find_typed(const GgufFile& f, std::string_view key, const char* expected,
                                    bool (*accepts)(const GgufValue&)) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return key_error(f.name(), key, "is missing");
  if (!accepts(*v)) return key_error(f.name(), key, "has type " + describe_type(*v) + "; expected " + expected);
  return v;
}

bool numeric_array(const GgufValue& v, bool allow_float) {
  return v.type == GgufValueType::kArray &&
         (is_integer_type(v.array_type) || (allow_float && is_float_type(v.array_type)));
}

}  // namespace

Result<std::string> GgufFile::get_string(std::string_view key) const {
  ONEBIT_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(*this, key, "string", [](const GgufValue& x) {
    return x.type == GgufValueType::kString;
  }));
  return std::string(v->str);
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  ONEBIT_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(*this, key, "an integer", [](const GgufValue& x) {
    return x.is_integer();
  }));
  if (v->type == GgufValueType::kUint64 && v->as_uint() > static_cast<uint64_t>(INT64_MAX)) {
    return key_error(name_, key, "= " + std::to_string(v->as_uint()) + " does not fit a signed 64-bit integer");
  }
  return v->as_int();
}

Result<uint64_t> GgufFile::get_uint(std::string_view key) const {
  ONEBIT_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(*this, key, "an integer", [](const GgufValue& x) {
    return x.is_integer();
  }));
  if (v->type != GgufValueType::kUint64 && v->as_int() < 0) {
    return key_error(name_, key, "= " + std::to_string(v->as_int()) + " is negative; expected a count or size");
  }
  return v->as_uint();
}

Result<double> GgufFile::get_float(std::string_view key) const {
  ONEBIT_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(*this, key, "a number", [](const GgufValue& x) {
    return x.is_integer() || x.is_float();
  }));
  return v->as_float();
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  ONEBIT_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(*this, key, "bool", [](const GgufValue& x) {
    return x.type == GgufValueType::kBool;
  }));
  return v->as_bool();
}

Result<std::vector<std::string_view>> GgufFile::get_string_array(std::string_view key) const {
  ONEBIT_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(*this, key, "array of string", [](const GgufValue& x) {
    return x.type == GgufValueType::kArray && x.array_type == GgufValueType::kString;
  }));
  return v->strings;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  ONEBIT_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(*this, key, "array of integers", [](const GgufValue& x) {
    return numeric_array(x, /*allow_float=*/false);
  }));
  std::vector<int64_t> out(v->array_count);
  for (uint64_t i = 0; i < v->array_count; ++i) out[i] = v->array_int(i);
  return out;
}

Result<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  ONEBIT_ASSIGN_OR_RETURN(const GgufValue* v, find_typed(*this, key, "array of numbers", [](const GgufValue& x) {
    return numeric_array(x, /*allow_float=*/true);
  }));
  std::vector<float> out(v->array_count);
  for (uint64_t i = 0; i < v->array_count; ++i) out[i] = static_cast<float>(v->array_float(i));
  return out;
}

}  // namespace onebit
