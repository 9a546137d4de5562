// GgufWriter: byte-identical round trips of the shared test files, typed values, layout against
// bytes written out by hand from the GGUF spec, and errors that name the tensor or the path.
#include "gguf/gguf_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "testdata.h"

namespace onebit {
namespace {

using ::onebit::testing::testdata_path;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string temp_dir() {
  auto dir = fs::temp_directory_path() / ("onebit_gguf_writer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir.string();
}

// Read, copy everything into a writer, write to memory and to a file; both must equal the input.
void expect_round_trip(const std::string& rel) {
  const std::string path = testdata_path(rel);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  GgufWriter w;
  w.copy_metadata(*f);
  for (const auto& t : f->tensors()) ASSERT_TRUE(w.add_tensor(t).ok()) << t.name;
  auto mem = w.write_to_memory();
  ASSERT_TRUE(mem.ok()) << mem.message();
  const auto original = read_all(path);
  ASSERT_EQ(mem->size(), original.size()) << rel;
  EXPECT_TRUE(*mem == original) << rel << ": bytes differ";
  const std::string out = temp_dir() + "/" + fs::path(rel).filename().string();
  auto st = w.write_file(out);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(read_all(out) == original) << rel << ": written file differs";
  // The temporary file was renamed away.
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  fs::remove(out);
  // And the output reads back with the same directory.
  auto again = GgufFile::from_memory(*mem);
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(again->metadata().size(), f->metadata().size());
  EXPECT_EQ(again->tensors().size(), f->tensors().size());
}

TEST(GgufWriter, RoundTripStories260KIsByteIdentical) {
  ONEBIT_REQUIRE_TESTDATA("models/stories260K.gguf");
  expect_round_trip("models/stories260K.gguf");
}

TEST(GgufWriter, RoundTripEveryVocabFileIsByteIdentical) {
  ONEBIT_REQUIRE_TESTDATA("vocab");
  int n = 0;
  for (const auto& e : fs::directory_iterator(testdata_path("vocab"))) {
    if (e.path().extension() != ".gguf") continue;
    SCOPED_TRACE(e.path().string());
    expect_round_trip("vocab/" + e.path().filename().string());
    ++n;
  }
  EXPECT_GE(n, 5);
}

// A tiny file written out by hand from the spec (docs/gguf.md in ggml): header, one kv, one
// tensor info, padding to 32, the tensor's 8 bytes, padding to 32.
TEST(GgufWriter, LayoutMatchesTheSpecByteForByte) {
  const float values[2] = {1.0f, -2.0f};
  GgufWriter w;
  w.set_uint32("a", 7);
  const uint64_t ne[1] = {2};
  ASSERT_TRUE(w.add_tensor("t", 0, ne, {reinterpret_cast<const uint8_t*>(values), 8}).ok());
  auto mem = w.write_to_memory();
  ASSERT_TRUE(mem.ok());
  const std::vector<uint8_t> expected = {
      'G', 'G', 'U', 'F', 3, 0, 0, 0,   // magic, version 3
      1, 0, 0, 0, 0, 0, 0, 0,           // n_tensors
      1, 0, 0, 0, 0, 0, 0, 0,           // n_kv
      1, 0, 0, 0, 0, 0, 0, 0, 'a',      // key "a"
      4, 0, 0, 0, 7, 0, 0, 0,           // uint32 7
      1, 0, 0, 0, 0, 0, 0, 0, 't',      // tensor name "t"
      1, 0, 0, 0,                       // n_dims
      2, 0, 0, 0, 0, 0, 0, 0,           // ne[0]
      0, 0, 0, 0,                       // type f32
      0, 0, 0, 0, 0, 0, 0, 0,           // offset 0
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // pad 74 -> 96
      0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0,  // 1.0f, -2.0f
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // pad 104 -> 128
  };
  EXPECT_EQ(*mem, expected);
}

TEST(GgufWriter, TypedValuesTensorsAndAlignmentReadBack) {
  GgufWriter w;
  w.set_string("general.architecture", "test");
  w.set_uint32("general.alignment", 64);
  w.set_uint8("v.u8", 200);
  w.set_int8("v.i8", -5);
  w.set_uint16("v.u16", 60000);
  w.set_int16("v.i16", -30000);
  w.set_int32("v.i32", -7);
  w.set_uint64("v.u64", 1ull << 40);
  w.set_int64("v.i64", -(1ll << 40));
  w.set_float32("v.f32", 0.25f);
  w.set_float64("v.f64", -1.5);
  w.set_bool("v.bool", true);
  const std::vector<int32_t> ints = {3, -1, 4};
  w.set_array<int32_t>("v.ints", ints);
  const std::vector<float> floats = {0.5f, 1.5f};
  w.set_array<float>("v.floats", floats);
  w.set_bool_array("v.bools", {true, false});
  const std::vector<std::string> strs = {"a", "", "héllo"};
  w.set_string_array("v.strs", strs);
  w.set_int32("v.i32", 9);  // replaces in place
  std::vector<uint8_t> q8(2 * 34, 0x11);
  std::vector<float> f32(12, 3.0f);
  const uint64_t ne_q[2] = {32, 2}, ne_f[2] = {4, 3};
  ASSERT_TRUE(w.add_tensor("q", static_cast<uint32_t>(GgmlType::kQ8_0), ne_q, q8).ok());
  ASSERT_TRUE(w.add_tensor("f", 0, ne_f, {reinterpret_cast<const uint8_t*>(f32.data()), 48}).ok());
  auto mem = w.write_to_memory();
  ASSERT_TRUE(mem.ok()) << mem.message();
  auto f = GgufFile::from_memory(*mem);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(mem->size() % 64, 0u);
  const auto& md = f->metadata();
  ASSERT_EQ(md.size(), 16u);
  EXPECT_EQ(md[6].key, "v.i32");  // kept its position when replaced
  EXPECT_EQ(*f->get_int("v.i32"), 9);
  EXPECT_EQ(*f->get_uint("v.u8"), 200u);
  EXPECT_EQ(*f->get_int("v.i8"), -5);
  EXPECT_EQ(*f->get_uint("v.u16"), 60000u);
  EXPECT_EQ(*f->get_int("v.i16"), -30000);
  EXPECT_EQ(*f->get_uint("v.u64"), 1ull << 40);
  EXPECT_EQ(*f->get_int("v.i64"), -(1ll << 40));
  EXPECT_EQ(*f->get_float("v.f32"), 0.25);
  EXPECT_EQ(*f->get_float("v.f64"), -1.5);
  EXPECT_TRUE(*f->get_bool("v.bool"));
  EXPECT_EQ(*f->get_int_array("v.ints"), std::vector<int64_t>({3, -1, 4}));
  EXPECT_EQ(*f->get_float_array("v.floats"), floats);
  EXPECT_EQ(f->find("v.bools")->array_int(0), 1);
  EXPECT_EQ(f->find("v.bools")->array_int(1), 0);
  auto s = f->get_string_array("v.strs");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(std::vector<std::string>(s->begin(), s->end()), strs);
  EXPECT_FALSE(f->get_uint("v.i8").ok());  // negative
  const GgufTensorInfo* tq = f->find_tensor("q");
  const GgufTensorInfo* tf = f->find_tensor("f");
  ASSERT_TRUE(tq && tf);
  EXPECT_EQ(tq->offset, 0u);
  EXPECT_EQ(tf->offset, 128u);  // 68 bytes padded to 64
  EXPECT_EQ(std::memcmp(tq->data, q8.data(), q8.size()), 0);
  EXPECT_EQ(std::memcmp(tf->data, f32.data(), 48), 0);
  // Copying the parsed file gives the same bytes again.
  GgufWriter w2;
  w2.copy_metadata(*f);
  for (const auto& t : f->tensors()) ASSERT_TRUE(w2.add_tensor(t).ok());
  EXPECT_EQ(*w2.write_to_memory(), *mem);
  EXPECT_TRUE(w2.remove("v.u8"));
  EXPECT_FALSE(w2.remove("v.u8"));
  EXPECT_EQ(w2.n_kv(), 15u);
}

TEST(GgufWriter, AddTensorErrorsNameTheTensor) {
  GgufWriter w;
  std::vector<uint8_t> bytes(64);
  const uint64_t ok_ne[1] = {16};
  ASSERT_TRUE(w.add_tensor("x", 0, ok_ne, bytes).ok());
  auto dup = w.add_tensor("x", 0, ok_ne, bytes);
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(dup.message(), HasSubstr("tensor 'x': a tensor of that name was already added"));
  const uint64_t ne8[1] = {8};
  auto size = w.add_tensor("y", 0, ne8, bytes);
  ASSERT_FALSE(size.ok());
  EXPECT_THAT(size.message(), HasSubstr("data is 64 bytes; f32 with these dimensions needs 32"));
  auto block = w.add_tensor("z", static_cast<uint32_t>(GgmlType::kQ4_0), ne8, bytes);
  ASSERT_FALSE(block.ok());
  EXPECT_THAT(block.message(), HasSubstr("not a multiple of the q4_0 block size 32"));
  const uint64_t ne5[5] = {1, 1, 1, 1, 1};
  EXPECT_THAT(w.add_tensor("d", 0, ne5, bytes).message(), HasSubstr("5 dimensions"));
  EXPECT_THAT(w.add_tensor("u", 31, ok_ne, bytes).message(), HasSubstr("unknown tensor type 31"));
  EXPECT_THAT(w.add_tensor(std::string(64, 'n'), 0, ok_ne, bytes).message(), HasSubstr("name is 64 bytes"));
  EXPECT_EQ(w.n_tensors(), 1u);
}

TEST(GgufWriter, WriteErrorsNameThePath) {
  GgufWriter w;
  w.set_string("k", "v");
  auto st = w.write_file("/nonexistent/dir/out.gguf");
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("/nonexistent/dir/out.gguf"));
  std::cout << "  " << st.message() << "\n";
  w.set_uint32("general.alignment", 3);
  auto bad = w.write_to_memory();
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("general.alignment must be a uint32 power of two"));
  w.set_uint64("general.alignment", 32);
  EXPECT_FALSE(w.write_to_memory().ok());
  w.remove("general.alignment");
  w.set_string("bad\nkey", "v");
  EXPECT_THAT(w.write_to_memory().message(), HasSubstr("printable ASCII"));
}

}  // namespace
}  // namespace onebit
