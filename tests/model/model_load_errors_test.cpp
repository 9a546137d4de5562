// Model::load on broken files: each outside-input fault is an error (never an abort) that names
// the stage, the tensor or key and the value. Files are stories260K with one thing changed.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "testdata.h"

namespace onebit {
namespace {

constexpr const char* kModel = "models/stories260K.gguf";

// Rewrites stories260K through `edit` (which may change metadata and the tensor list) and loads it.
std::string load_error(const std::function<void(GgufWriter&, std::vector<GgufTensorInfo>&)>& edit) {
  auto src = GgufFile::open(testing::testdata_path(kModel));
  if (!src.ok()) return "open: " + src.message();
  GgufWriter w;
  w.copy_metadata(*src);
  std::vector<GgufTensorInfo> tensors = src->tensors();
  edit(w, tensors);
  for (const auto& t : tensors) {
    auto st = w.add_tensor(t);
    if (!st.ok()) return "add_tensor: " + st.message();
  }
  auto bytes = w.write_to_memory();
  if (!bytes.ok()) return "write: " + bytes.message();
  auto file = GgufFile::from_memory(*bytes, "edited.gguf");
  if (!file.ok()) return "reopen: " + file.message();
  auto backend = make_reference_backend();
  auto model = Model::load(*file, *backend);
  return model.ok() ? "" : model.message();
}

void drop_tensor(std::vector<GgufTensorInfo>& ts, std::string_view name) {
  std::erase_if(ts, [&](const GgufTensorInfo& t) { return t.name == name; });
}

TEST(ModelLoadErrors, UnchangedFileLoads) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  EXPECT_EQ(load_error([](GgufWriter&, std::vector<GgufTensorInfo>&) {}), "");
}

TEST(ModelLoadErrors, UnsupportedArchitecture) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  const std::string e = load_error([](GgufWriter& w, auto&) { w.set_string("general.architecture", "gemma3"); });
  EXPECT_EQ(e.rfind("config: ", 0), 0u) << e;
  EXPECT_NE(e.find("gemma3"), std::string::npos) << e;
  EXPECT_NE(e.find("llama, qwen2, qwen3"), std::string::npos) << e;
}

TEST(ModelLoadErrors, MissingKeyAndBadValue) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  std::string e = load_error([](GgufWriter& w, auto&) { w.remove("llama.block_count"); });
  EXPECT_NE(e.find("llama.block_count"), std::string::npos) << e;
  e = load_error([](GgufWriter& w, auto&) { w.set_uint32("llama.attention.head_count_kv", 3); });
  EXPECT_NE(e.find("head_count_kv is 3"), std::string::npos) << e;
  e = load_error([](GgufWriter& w, auto&) { w.set_uint32("llama.rope.dimension_count", 9); });
  EXPECT_NE(e.find("dimension_count is 9"), std::string::npos) << e;
  e = load_error([](GgufWriter& w, auto&) { w.set_string("llama.rope.scaling.type", "ntk"); w.set_float32("llama.rope.scaling.factor", 2); });
  EXPECT_NE(e.find("'ntk'"), std::string::npos) << e;
}

TEST(ModelLoadErrors, MissingTensor) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  const std::string e = load_error([](GgufWriter&, auto& ts) { drop_tensor(ts, "blk.3.ffn_up.weight"); });
  EXPECT_EQ(e.rfind("tensors: missing tensor blk.3.ffn_up.weight", 0), 0u) << e;
}

TEST(ModelLoadErrors, WrongShape) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  // attn_k claims 64 rows (as many as q) where the config's 4 kv heads x 8 give 32.
  const std::string e = load_error([](GgufWriter&, auto& ts) {
    for (auto& t : ts) {
      if (t.name == "blk.0.attn_k.weight") {
        for (auto& q : ts) {
          if (q.name == "blk.0.attn_q.weight") t = q;
        }
        t.name = "blk.0.attn_k.weight";
      }
    }
  });
  EXPECT_NE(e.find("tensors: blk.0.attn_k.weight has shape [64, 64]"), std::string::npos) << e;
  EXPECT_NE(e.find("[64, 32]"), std::string::npos) << e;
}

TEST(ModelLoadErrors, UnsupportedTypes) {
  ONEBIT_REQUIRE_TESTDATA(kModel);
  // A norm stored as f16 (bytes re-labelled; 64 f16 values fit in the 256 f32 bytes' first half).
  std::string e = load_error([](GgufWriter&, auto& ts) {
    for (auto& t : ts) {
      if (t.name == "output_norm.weight") {
        t.raw_type = static_cast<uint32_t>(GgmlType::kF16);
        t.n_bytes = 128;
      }
    }
  });
  EXPECT_NE(e.find("output_norm.weight has type f16"), std::string::npos) << e;
  // A matrix of q8_1, a type ggml uses only for activations.
  e = load_error([](GgufWriter&, auto& ts) {
    for (auto& t : ts) {
      if (t.name == "blk.1.attn_q.weight") {
        t.raw_type = static_cast<uint32_t>(GgmlType::kQ8_1);
        t.n_bytes = 64 * 2 * 36;
      }
    }
  });
  EXPECT_NE(e.find("blk.1.attn_q.weight has type q8_1"), std::string::npos) << e;
}

}  // namespace
}  // namespace onebit
