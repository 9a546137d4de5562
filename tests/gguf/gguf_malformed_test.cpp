// Hand-made malformed GGUF files: each must give an error naming the field and the value (shown
// on stdout), through from_memory and through open(); never a crash. Also nested-array limits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "gguf/gguf_reader.h"

namespace onebit {
namespace {

using ::testing::HasSubstr;

// Little-endian byte builder for GGUF pieces.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    const size_t old = b.size();
    b.resize(old + sizeof(T));
    std::memcpy(b.data() + old, &v, sizeof(T));
    return *this;
  }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  Bytes& pad(uint64_t align) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
};

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;
};

// A file described field by field; the defaults make a valid file that ends with tensor data.
struct FileSpec {
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors, n_kv;  // override the real counts
  std::vector<std::function<void(Bytes&)>> kvs = {
      [](Bytes& b) { b.kv_str("general.architecture", "test"); },
      [](Bytes& b) { b.kv_u32("general.alignment", 32); },
  };
  std::vector<TensorSpec> tensors = {
      {"a", {32}, 8, 0},  // q8_0: 34 bytes, next offset 64
      {"b", {8}, 0, 64},  // f32: 32 bytes, ends the file
  };
  uint64_t alignment = 32;
  std::optional<uint64_t> data_bytes;  // default: up to the end of the last tensor
};

std::vector<uint8_t> build(const FileSpec& s) {
  Bytes b;
  b.b = {'G', 'G', 'U', 'F'};
  b.u32(s.version).u64(s.n_tensors.value_or(s.tensors.size())).u64(s.n_kv.value_or(s.kvs.size()));
  for (const auto& kv : s.kvs) kv(b);
  uint64_t end = 0;
  for (const auto& t : s.tensors) {
    b.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) b.u64(d);
    b.u32(t.type).u64(t.offset);
    auto traits = ggml_type_traits(t.type);
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    if (traits && n < (1ull << 40)) end = std::max(end, t.offset + n / traits->block_elems * traits->block_bytes);
  }
  if (!s.tensors.empty()) b.pad(s.alignment);
  b.b.resize(b.b.size() + s.data_bytes.value_or(end), 0x5a);
  return b.b;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("onebit_malformed_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// Both entry points must refuse `bytes` with a message containing `want`; the message is shown.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& want) {
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  auto r = GgufFile::from_memory(bytes, name + ".gguf");
  ASSERT_FALSE(r.ok()) << "accepted a malformed file";
  EXPECT_THAT(r.message(), HasSubstr(want));
  std::cout << "  " << r.message() << "\n";
  ::testing::Test::RecordProperty("error", r.message());
  const std::string path = temp_path(name + ".gguf");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  auto o = GgufFile::open(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.message(), HasSubstr(want));
  EXPECT_THAT(o.message(), HasSubstr(path));
}

TEST(GgufMalformed, BaseFileIsValid) {
  const auto bytes = build(FileSpec{});
  auto f = GgufFile::from_memory(bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].n_bytes, 34u);
  EXPECT_EQ(f->data_offset() + 64 + 32, bytes.size());
}

TEST(GgufMalformed, EveryTruncationIsAnError) {
  const auto bytes = build(FileSpec{});
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    auto r = GgufFile::from_memory(prefix);
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
    if (n % 16 == 0 || n + 1 == bytes.size()) std::cout << "  " << n << " bytes: " << r.message() << "\n";
  }
  std::vector<uint8_t> header_only(bytes.begin(), bytes.begin() + 30);
  expect_error(header_only, "header n_kv = 2 is implausible");
  std::vector<uint8_t> in_infos(bytes.begin(), bytes.begin() + 128);
  expect_error(in_infos, "tensor 'a' offset needs 8 bytes at byte 126 but the file ends at byte 128");
  std::vector<uint8_t> in_data(bytes.begin(), bytes.end() - 1);
  expect_error(in_data, "tensor 'b': offset 64 + 32 bytes runs past the end of the file");
}

TEST(GgufMalformed, EmptyFile) { expect_error({}, "file is 0 bytes"); }

TEST(GgufMalformed, BadMagic) {
  auto bytes = build(FileSpec{});
  std::memcpy(bytes.data(), "GGML", 4);
  expect_error(bytes, "magic is 'GGML' (bytes 47 47 4d 4c), expected 'GGUF'");
}

TEST(GgufMalformed, Version1) {
  FileSpec s;
  s.version = 1;
  expect_error(build(s), "version 1 is not supported");
}

TEST(GgufMalformed, Version4) {
  FileSpec s;
  s.version = 4;
  expect_error(build(s), "version 4 is not supported");
}

TEST(GgufMalformed, BigEndian) {
  FileSpec s;
  s.version = 0x03000000;  // version 3 written big-endian
  expect_error(build(s), "the file is big-endian");
}

TEST(GgufMalformed, HugeKvCount) {
  FileSpec s;
  s.n_kv = 1ull << 62;
  expect_error(build(s), "header n_kv = 4611686018427387904 is implausible");
}

TEST(GgufMalformed, HugeTensorCount) {
  FileSpec s;
  s.n_tensors = 1000000;
  expect_error(build(s), "header n_tensors = 1000000 is implausible");
}

TEST(GgufMalformed, HugeStringLength) {
  FileSpec s;
  s.kvs[0] = [](Bytes& b) { b.str("general.architecture").u32(8).u64(1ull << 60); };
  expect_error(build(s), "kv 0 'general.architecture' string: length 1152921504606846976");
}

TEST(GgufMalformed, HugeArrayCount) {
  FileSpec s;
  s.kvs.push_back([](Bytes& b) { b.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(1ull << 61); });
  expect_error(build(s), "kv 2 'tokenizer.ggml.tokens' array length (of strings) = 2305843009213693952 is implausible");
}

TEST(GgufMalformed, HugeNumericArrayCountOverflows) {
  FileSpec s;
  s.kvs.push_back([](Bytes& b) { b.str("x.scores").u32(9).u32(12).u64(1ull << 62); });  // 2^62 float64
  expect_error(build(s), "array length (of float64) = 4611686018427387904 is implausible");
}

TEST(GgufMalformed, UnknownValueType) {
  FileSpec s;
  s.kvs.push_back([](Bytes& b) { b.str("x.weird").u32(13).u32(0); });
  expect_error(build(s), "kv 2 'x.weird': unknown value type 13");
}

TEST(GgufMalformed, UnknownArrayElementType) {
  FileSpec s;
  s.kvs.push_back([](Bytes& b) { b.str("x.arr").u32(9).u32(99).u64(1); });
  expect_error(build(s), "kv 2 'x.arr': array has unknown element type 99");
}

TEST(GgufMalformed, DuplicateKey) {
  FileSpec s;
  s.kvs.push_back([](Bytes& b) { b.kv_str("general.architecture", "again"); });
  expect_error(build(s), "kv 2 'general.architecture': duplicate key (first defined by kv 0)");
}

TEST(GgufMalformed, KeyNotPrintable) {
  FileSpec s;
  s.kvs.push_back([](Bytes& b) { b.kv_u32(std::string("bad\x01key", 7), 1); });
  expect_error(build(s), "has byte 01 at position 3; keys must be printable ASCII");
}

TEST(GgufMalformed, EmptyKey) {
  FileSpec s;
  s.kvs.push_back([](Bytes& b) { b.kv_u32("", 1); });
  expect_error(build(s), "kv 2: key is empty");
}

TEST(GgufMalformed, AlignmentZero) {
  FileSpec s;
  s.kvs[1] = [](Bytes& b) { b.kv_u32("general.alignment", 0); };
  expect_error(build(s), "kv 'general.alignment' = 0; it must be a power of two");
}

TEST(GgufMalformed, AlignmentThree) {
  FileSpec s;
  s.kvs[1] = [](Bytes& b) { b.kv_u32("general.alignment", 3); };
  expect_error(build(s), "kv 'general.alignment' = 3; it must be a power of two");
}

TEST(GgufMalformed, AlignmentWrongType) {
  FileSpec s;
  s.kvs[1] = [](Bytes& b) { b.str("general.alignment").u32(10).u64(32); };
  expect_error(build(s), "kv 'general.alignment' has type uint64; it must be uint32");
}

TEST(GgufMalformed, UnknownTensorType) {
  FileSpec s;
  s.tensors[1].type = 31;
  s.data_bytes = 96;
  expect_error(build(s), "tensor 'b': unknown tensor type 31");
}

TEST(GgufMalformed, ZeroDims) {
  FileSpec s;
  s.tensors[0].ne = {};
  expect_error(build(s), "tensor 'a': n_dims = 0; it must be 1 to 4");
}

TEST(GgufMalformed, FiveDims) {
  FileSpec s;
  s.tensors[0].ne = {32, 1, 1, 1, 1};
  expect_error(build(s), "tensor 'a': n_dims = 5; it must be 1 to 4");
}

TEST(GgufMalformed, ZeroDimension) {
  FileSpec s;
  s.tensors[1].ne = {8, 0};
  expect_error(build(s), "tensor 'b': ne[1] = 0; every dimension must be at least 1");
}

TEST(GgufMalformed, NegativeDimension) {
  FileSpec s;
  s.tensors[1].ne = {uint64_t(-8)};
  expect_error(build(s), "tensor 'b': ne[0] = 18446744073709551608 exceeds the int64 range");
}

TEST(GgufMalformed, DimensionsOverflow) {
  FileSpec s;
  s.tensors[1].ne = {1ull << 32, 1ull << 32};
  s.data_bytes = 96;
  expect_error(build(s), "tensor 'b': dimensions [4294967296, 4294967296] hold more than 2^63 elements");
}

TEST(GgufMalformed, BlockSizeMismatch) {
  FileSpec s;
  s.tensors[0].ne = {16, 2};  // q8_0 blocks hold 32 values
  s.data_bytes = 96;
  expect_error(build(s), "tensor 'a': ne[0] = 16 is not a multiple of the q8_0 block size 32");
}

TEST(GgufMalformed, OffsetPastEnd) {
  FileSpec s;
  s.tensors[1].offset = 4096;
  s.data_bytes = 96;
  expect_error(build(s), "tensor 'b': offset 4096 + 32 bytes runs past the end of the file");
}

TEST(GgufMalformed, OffsetOverflows) {
  FileSpec s;
  s.tensors[1].offset = uint64_t(-32);
  s.data_bytes = 96;
  expect_error(build(s), "tensor 'b': offset 18446744073709551584 + 32 bytes runs past the end");
}

TEST(GgufMalformed, MisalignedOffset) {
  FileSpec s;
  s.tensors[1].offset = 48;
  expect_error(build(s), "tensor 'b': offset 48 is not a multiple of the alignment 32");
}

TEST(GgufMalformed, OverlappingTensors) {
  FileSpec s;
  s.tensors[1].offset = 32;  // 'a' covers bytes 0..33
  expect_error(build(s), "tensor 'b' (offset 32, 32 bytes) overlaps tensor 'a' (offset 0, 34 bytes)");
}

TEST(GgufMalformed, DuplicateTensorName) {
  FileSpec s;
  s.tensors[1].name = "a";
  s.tensors[1].type = 8;
  s.tensors[1].ne = {32};
  expect_error(build(s), "tensor 'a': duplicate tensor name (first defined by tensor 0)");
}

TEST(GgufMalformed, TensorNameTooLong) {
  FileSpec s;
  s.tensors[1].name = std::string(64, 'w');
  expect_error(build(s), "is 64 bytes; ggml allows at most 63");
}

// Nested arrays: the spec allows them; 1bit parses them up to kGgufMaxArrayDepth levels.
Bytes nested_array_kv(int depth) {
  Bytes b;
  b.str("x.nested").u32(9);
  for (int i = 1; i < depth; ++i) b.u32(9).u64(1);  // an array holding one array
  b.u32(4).u64(2).u32(7).u32(8);                    // innermost: uint32 [7, 8]
  return b;
}

TEST(GgufMalformed, NestedArraysWithinLimitParse) {
  FileSpec s;
  s.kvs.push_back([](Bytes& b) {
    auto kv = nested_array_kv(3);
    b.b.insert(b.b.end(), kv.b.begin(), kv.b.end());
  });
  const auto bytes = build(s);
  auto f = GgufFile::from_memory(bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  const GgufValue* v = f->find("x.nested");
  ASSERT_NE(v, nullptr);
  ASSERT_EQ(v->array_type, GgufValueType::kArray);
  ASSERT_EQ(v->array_nested.size(), 1u);
  const GgufValue& inner = v->array_nested[0].array_nested[0];
  EXPECT_EQ(inner.array_type, GgufValueType::kUint32);
  EXPECT_EQ(inner.array_count, 2u);
  EXPECT_EQ(inner.array_int(1), 8);
}

TEST(GgufMalformed, NestedArraysTooDeep) {
  FileSpec s;
  s.kvs.push_back([](Bytes& b) {
    auto kv = nested_array_kv(kGgufMaxArrayDepth + 1);
    b.b.insert(b.b.end(), kv.b.begin(), kv.b.end());
  });
  expect_error(build(s), "kv 2 'x.nested'[0][0][0][0][0][0][0][0]: arrays nested more than 8 deep");
}

TEST(GgufMalformed, TooManyNestedArrayElements) {
  FileSpec s;
  s.kvs.push_back([](Bytes& b) {
    const uint64_t n = kGgufMaxNestedElements + 1;
    b.str("x.many").u32(9).u32(9).u64(n);
    for (uint64_t i = 0; i < n; ++i) b.u32(0).u64(0);  // empty uint8 arrays, 12 bytes each
  });
  expect_error(build(s), "kv 2 'x.many': nested arrays hold more than 1048576 elements in all");
}

TEST(GgufMalformed, NoTensorsAndNoPaddingIsValid) {
  FileSpec s;
  s.tensors.clear();
  const auto bytes = build(s);
  auto f = GgufFile::from_memory(bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->data_offset(), bytes.size());
}

TEST(GgufMalformed, TensorsOutOfOrderAreValid) {
  FileSpec s;
  s.tensors[0].offset = 32;  // 'a' (34 bytes) after 'b' (32 bytes)
  s.tensors[1].offset = 0;
  auto f = GgufFile::from_memory(build(s));
  ASSERT_TRUE(f.ok()) << f.message();
}

}  // namespace
}  // namespace onebit
