// Tensor-by-tensor re-encoding: dequantize each row to float, quantize with the reference
// quantizer, rows split across threads. Type choice follows llama.cpp's llama_tensor_get_type.
#include "model/quantize_model.h"


#include <algorithm>
#include <atomic>
#include <cctype>
#include <memory>
#include <thread>
#include <vector>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "gguf/quants.h"
#include "backend/hadamard.h"
#include "model/rotation.h"

namespace onebit {
namespace {

bool is_float(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama.cpp's fallback when a row is not a whole number of 256-element super-blocks.
GgmlType k_fallback(GgmlType t, int64_t n_cols) {
  if (n_cols % kQK_K == 0) return t;
  switch (t) {
    case GgmlType::kQ4_K: return GgmlType::kQ5_0;
    case GgmlType::kQ5_K: return GgmlType::kQ5_1;
    case GgmlType::kQ6_K: return GgmlType::kQ8_0;
    default: return t;
  }
}

// llama_ftype values for general.file_type.
uint32_t file_type(const QuantTarget& t) {
  if (t.mix == QuantMix::kQ4_K_M) return 15;
  if (t.mix == QuantMix::kQ5_K_M) return 17;
  switch (t.type) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ4_0: return 2;
    case GgmlType::kQ4_1: return 3;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kQ5_0: return 8;
    case GgmlType::kQ5_1: return 9;
    case GgmlType::kQ4_K: return 14;  // Q4_K_S is the nearest named ftype
    case GgmlType::kQ5_K: return 16;
    case GgmlType::kQ6_K: return 18;
    default: return 32;               // BF16
  }
}

int layer_of(std::string_view name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int v = 0;
  for (size_t i = 4; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) v = v * 10 + (name[i] - '0');
  return v;
}

}  // namespace

std::optional<QuantTarget> parse_quant_target(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "q4_k_m") return QuantTarget{GgmlType::kQ4_K, QuantMix::kQ4_K_M};
  if (lower == "q5_k_m") return QuantTarget{GgmlType::kQ5_K, QuantMix::kQ5_K_M};
  const auto t = ggml_type_from_name(name);
  if (!t) return std::nullopt;
  switch (*t) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: case GgmlType::kQ8_0:
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return QuantTarget{*t, QuantMix::kNone};
    default:
      return std::nullopt;
  }
}

GgmlType quant_type_for(const QuantTarget& target, std::string_view name, int n_dims, int64_t n_cols,
                        int layer_idx, int n_layers, bool tied_output) {
  const bool matrix = n_dims >= 2 && name.size() > 7 && name.substr(name.size() - 7) == ".weight";
  // Norms, biases, the experts' routers (ffn_gate_inp*: few bytes, and a rounded router picks
  // other experts) and the delta nets' convolutions (ssm_conv1d, read as f32) stay f32, as
  // llama.cpp's quantizer keeps them.
  if (!matrix || name.find("ffn_gate_inp") != std::string_view::npos || name.find("ssm_conv1d") != std::string_view::npos) {
    return GgmlType::kF32;
  }
  GgmlType t = target.type;
  const bool is_output = name == "output.weight" || (tied_output && name == "token_embd.weight");
  if (is_output && !is_float(t) && t != GgmlType::kQ8_0) {
    t = GgmlType::kQ6_K;
  } else if (target.mix != QuantMix::kNone && layer_idx >= 0 &&
             (name.find("attn_v.weight") != std::string_view::npos ||
              name.find("ffn_down") != std::string_view::npos) &&  // ffn_down, _exps, _shexp
             use_more_bits(layer_idx, n_layers)) {
    t = GgmlType::kQ6_K;
  }
  t = k_fallback(t, n_cols);
  if (!is_float(t) && n_cols % 32 != 0) t = GgmlType::kF16;  // no whole block: keep it exact-ish
  return t;
}

Status quantize_model(const QuantizeOptions& o) {
  auto in = GgufFile::open(o.in_path);
  if (!in.ok()) return make_error("quantize: " + in.message());
  ONEBIT_ASSIGN_OR_RETURN(const int32_t rotated, hadamard_block(*in));
  if (o.hadamard != 0 && o.hadamard != 32) return make_error("quantize: --hadamard " + std::to_string(o.hadamard) + "; the block must be 32");
  if (o.hadamard > 0 && rotated > 0) {
    return make_error("quantize: " + o.in_path + " is already Hadamard-rotated (" + std::string(kHadamardKey) +
                      "); rotate an unrotated file");
  }
  const bool tied = in->find_tensor("output.weight") == nullptr;
  int n_layers = 0;
  for (const GgufTensorInfo& t : in->tensors()) n_layers = std::max(n_layers, layer_of(t.name) + 1);

  GgufWriter w;
  w.copy_metadata(*in);
  w.set_uint32("general.file_type", file_type(o.target));
  w.set_uint32("general.quantization_version", 2);
  if (o.hadamard > 0) w.set_uint32(std::string(kHadamardKey), uint32_t(o.hadamard));
  const int n_threads = o.n_threads > 0 ? o.n_threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::vector<uint8_t>> out_bytes(in->tensors().size());  // kept alive until the write
  int done = 0;
  for (size_t ti = 0; ti < in->tensors().size(); ++ti) {
    const GgufTensorInfo& t = in->tensors()[ti];
    if (!can_dequantize(t.type())) {
      return make_error("quantize: tensor " + std::string(t.name) + " has type " + ggml_type_name(t.raw_type) +
                        " which cannot be re-encoded");
    }
    const int64_t cols = int64_t(t.ne[0]);
    const int64_t rows = int64_t(t.n_elements) / std::max<int64_t>(cols, 1);
    const GgmlType type = quant_type_for(o.target, t.name, int(t.n_dims), cols, layer_of(t.name), n_layers, tied);
    const uint64_t in_rb = row_size(t.type(), cols).value();
    ONEBIT_ASSIGN_OR_RETURN(const uint64_t out_rb, row_size(type, cols));
    std::vector<uint8_t>& out = out_bytes[ti];
    out.resize(size_t(out_rb * rows));
    const bool rotate = rotated_by_hadamard(t.name, int(t.n_dims), cols, o.hadamard);
    std::atomic<int64_t> next{0};
    auto work = [&] {
      std::vector<float> row(static_cast<size_t>(cols));
      std::vector<double> exact(rotate ? static_cast<size_t>(cols) : 0);
      for (int64_t r; (r = next.fetch_add(64)) < rows;) {
        for (int64_t i = r; i < std::min(rows, r + 64); ++i) {
          dequantize_row(t.type(), t.data + i * in_rb, row.data(), cols);
          if (rotate) {  // W H per block, in double, then encoded
            std::copy(row.begin(), row.end(), exact.begin());
            hadamard_rotate(exact.data(), cols, o.hadamard);
            std::copy(exact.begin(), exact.end(), row.begin());
          }
          quantize_row_reference(type, row.data(), out.data() + i * out_rb, cols);
        }
      }
    };
    std::vector<std::thread> pool;
    for (int i = 1; i < std::min<int64_t>(n_threads, (rows + 63) / 64); ++i) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
    std::vector<uint64_t> ne(t.ne, t.ne + t.n_dims);
    ONEBIT_TRY(w.add_tensor(t.name, uint32_t(type), ne, out));
    if (o.progress) o.progress(++done, int(in->tensors().size()), t.name, type);
  }
  auto st = w.write_file(o.out_path);
  if (!st.ok()) return make_error("quantize: " + st.message());
  return ok_status();
}

}  // namespace onebit
