// convert_drafter on tiny hand-made MTP head and DFlash drafter checkpoints (the layout
// tools/train/export.py writes): names, shapes, metadata, exact F32 values, and the errors.
#include "model/convert_drafters.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"

namespace onebit {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int64_t kHidden = 32, kFfn = 64, kHeadDim = 16, kHeads = 2, kKvHeads = 1;

struct Tensor {
  std::vector<int64_t> shape;  // row-major
  std::vector<float> values;
};

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("onebit_drafters_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Writes config.json and an F32 model.safetensors; element i of each tensor is i * 0.01 + salt.
void write_checkpoint(const fs::path& dir, const json& config,
                      const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::ofstream(dir / "config.json") << config.dump();
  json header = json::object();
  std::vector<float> data;
  float salt = 0.0f;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    const size_t begin = data.size() * 4;
    for (int64_t i = 0; i < n; ++i) data.push_back(static_cast<float>(i) * 0.01f + salt);
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size() * 4}}};
    salt += 1.0f;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
}

json base_config(const std::string& model_type) {
  return {{"model_type", model_type},
          {"hidden_size", kHidden},
          {"intermediate_size", kFfn},
          {"num_attention_heads", kHeads},
          {"num_key_value_heads", kKvHeads},
          {"head_dim", kHeadDim},
          {"max_position_embeddings", 64},
          {"vocab_size", 100},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0}};
}

void add_block(std::map<std::string, std::vector<int64_t>>& s, const std::string& p) {
  s[p + "input_layernorm.weight"] = {kHidden};
  s[p + "self_attn.q_proj.weight"] = {kHeads * kHeadDim, kHidden};
  s[p + "self_attn.k_proj.weight"] = {kKvHeads * kHeadDim, kHidden};
  s[p + "self_attn.v_proj.weight"] = {kKvHeads * kHeadDim, kHidden};
  s[p + "self_attn.o_proj.weight"] = {kHidden, kHeads * kHeadDim};
  s[p + "self_attn.q_norm.weight"] = {kHeadDim};
  s[p + "self_attn.k_norm.weight"] = {kHeadDim};
  s[p + "post_attention_layernorm.weight"] = {kHidden};
  s[p + "mlp.gate_proj.weight"] = {kFfn, kHidden};
  s[p + "mlp.up_proj.weight"] = {kFfn, kHidden};
  s[p + "mlp.down_proj.weight"] = {kHidden, kFfn};
}

std::map<std::string, std::vector<int64_t>> mtp_shapes() {
  std::map<std::string, std::vector<int64_t>> s = {{"mtp.enorm.weight", {kHidden}},
                                                   {"mtp.hnorm.weight", {kHidden}},
                                                   {"mtp.eh_proj.weight", {kHidden, 2 * kHidden}},
                                                   {"mtp.norm.weight", {kHidden}}};
  add_block(s, "mtp.layers.0.");
  return s;
}

std::map<std::string, std::vector<int64_t>> dflash_shapes() {
  std::map<std::string, std::vector<int64_t>> s = {{"dflash.fc.weight", {kHidden, 2 * kHidden}},
                                                   {"dflash.hidden_norm.weight", {kHidden}},
                                                   {"dflash.mask_embd", {kHidden}},
                                                   {"dflash.norm.weight", {kHidden}}};
  add_block(s, "dflash.layers.0.");
  add_block(s, "dflash.layers.1.");
  return s;
}

TEST(ConvertDrafters, MtpHeadLayoutAndValues) {
  const fs::path dir = temp_dir("mtp");
  json c = base_config("qwen3_mtp");
  c["num_speculative_tokens"] = 3;
  write_checkpoint(dir, c, mtp_shapes());
  ASSERT_TRUE(is_drafter_checkpoint(dir.string()));
  const std::string out = (dir / "mtp.gguf").string();
  auto report = convert_drafter({dir.string(), out, GgmlType::kF32});
  ASSERT_TRUE(report.ok()) << report.message();
  EXPECT_EQ(report->architecture, "qwen3_mtp");
  EXPECT_EQ(report->n_tensors, 15);
  auto f = GgufFile::open(out);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(*f->get_string("general.architecture"), "qwen3_mtp");
  EXPECT_EQ(*f->get_uint("qwen3_mtp.nextn_predict_layers"), 1u);
  EXPECT_EQ(*f->get_uint("qwen3_mtp.draft_length"), 3u);
  EXPECT_EQ(*f->get_uint("qwen3_mtp.block_count"), 1u);
  EXPECT_EQ(*f->get_uint("qwen3_mtp.attention.key_length"), uint64_t(kHeadDim));
  const GgufTensorInfo* eh = f->find_tensor("blk.0.nextn.eh_proj.weight");
  ASSERT_NE(eh, nullptr);
  EXPECT_EQ(eh->ne[0], uint64_t(2 * kHidden));
  EXPECT_EQ(eh->ne[1], uint64_t(kHidden));
  float v = 0;
  std::memcpy(&v, eh->data + 4 * 5, 4);  // element 5 of the first tensor in name order (salt 0)
  EXPECT_FLOAT_EQ(v, 0.05f);
  for (const char* name :
       {"blk.0.nextn.enorm.weight", "blk.0.nextn.hnorm.weight", "blk.0.nextn.shared_head_norm.weight",
        "blk.0.attn_q.weight", "blk.0.attn_k_norm.weight", "blk.0.ffn_down.weight"}) {
    EXPECT_NE(f->find_tensor(name), nullptr) << name;
  }
  fs::remove_all(dir);
}

TEST(ConvertDrafters, DflashMetadataAndQ8) {
  const fs::path dir = temp_dir("dflash");
  json c = base_config("qwen3_dflash");
  c.update({{"num_hidden_layers", 2},
            {"block_size", 8},
            {"target_layer_ids", {0, 2}},
            {"add_last_context", true}});
  write_checkpoint(dir, c, dflash_shapes());
  const std::string out = (dir / "dflash.gguf").string();
  auto report = convert_drafter({dir.string(), out, GgmlType::kQ8_0});
  ASSERT_TRUE(report.ok()) << report.message();
  EXPECT_EQ(report->n_tensors, 26);
  auto f = GgufFile::open(out);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(*f->get_uint("qwen3_dflash.block_size"), 8u);
  EXPECT_EQ(*f->get_uint("qwen3_dflash.block_count"), 2u);
  EXPECT_EQ(*f->get_int_array("qwen3_dflash.target_layers"), (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(*f->get_bool("qwen3_dflash.add_last_context"));
  EXPECT_EQ(f->find_tensor("dflash.fc.weight")->type(), GgmlType::kQ8_0);
  EXPECT_EQ(f->find_tensor("dflash.mask_embd.weight")->type(), GgmlType::kF32);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down.weight")->ne[0], uint64_t(kFfn));
  EXPECT_NE(f->find_tensor("output_norm.weight"), nullptr);
  fs::remove_all(dir);
}

TEST(ConvertDrafters, Errors) {
  const fs::path dir = temp_dir("errors");
  auto shapes = mtp_shapes();
  shapes["mtp.extra.weight"] = {4};
  write_checkpoint(dir, base_config("qwen3_mtp"), shapes);
  auto r = convert_drafter({dir.string(), (dir / "x.gguf").string(), GgmlType::kF16});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("mtp.extra.weight"), std::string::npos) << r.message();
  EXPECT_FALSE(fs::exists(dir / "x.gguf"));

  write_checkpoint(dir, base_config("qwen3_dflash"), dflash_shapes());  // no num_hidden_layers, block_size
  r = convert_drafter({dir.string(), (dir / "x.gguf").string(), GgmlType::kF16});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("num_hidden_layers"), std::string::npos) << r.message();

  write_checkpoint(dir, base_config("qwen3"), mtp_shapes());
  EXPECT_FALSE(is_drafter_checkpoint(dir.string()));
  EXPECT_FALSE(is_drafter_checkpoint((dir / "missing").string()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace onebit
