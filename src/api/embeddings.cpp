// /v1/embeddings: parsing, the service and the job in flight; see embeddings.h.
#include "api/embeddings.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace onebit {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Sequences of one request running at once; the rest wait in the job, not in the engine's queue.
constexpr size_t kWindow = 64;
// How long run_for waits on one sequence before looking at the others again.
constexpr int kPollMs = 5;

constexpr const char* kInputShapes = "a string, an array of strings, an array of token ids, or an array of token-id arrays";

// A token id as JSON: an integer from 0 to INT32_MAX (the vocabulary is checked by the service).
ApiResult<int32_t> token_id(const ordered_json& v, const std::string& name) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
    return invalid_request("'" + name + "' must be a token id (an integer >= 0), got " +
                           v.dump(-1, ' ', false, ordered_json::error_handler_t::replace).substr(0, 64));
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

ApiResult<std::vector<int32_t>> token_list(const ordered_json& v, const std::string& name) {
  if (v.empty()) return invalid_request("'" + name + "' is an empty array; give token ids");
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (size_t j = 0; j < v.size(); ++j) {
    auto id = token_id(v[j], name + "[" + std::to_string(j) + "]");
    if (!id.ok()) return id.error;
    out.push_back(*id.value);
  }
  return out;
}

ApiResult<std::vector<EmbeddingInput>> parse_input(const ordered_json& body) {
  auto it = body.find("input");
  if (it == body.end() || it->is_null()) return invalid_request(std::string("'input' is required: ") + kInputShapes);
  const ordered_json& in = *it;
  std::vector<EmbeddingInput> out;
  if (in.is_string()) {
    if (in.get<std::string>().empty()) return invalid_request("'input' is an empty string; give some text");
    out.push_back({"input", true, in.get<std::string>(), {}});
    return out;
  }
  if (!in.is_array()) return wrong_type("input", kInputShapes, in);
  if (in.empty()) return invalid_request(std::string("'input' is an empty array; give ") + kInputShapes);
  if (in[0].is_number()) {  // one prompt of token ids
    auto ids = token_list(in, "input");
    if (!ids.ok()) return ids.error;
    out.push_back({"input", false, {}, std::move(*ids.value)});
    return out;
  }
  if (in.size() > kMaxEmbeddingInputs) {
    return invalid_request("'input' has " + std::to_string(in.size()) + " items; allowed at most " +
                           std::to_string(kMaxEmbeddingInputs) + " (send several requests)");
  }
  if (!in[0].is_string() && !in[0].is_array()) {
    return wrong_type("input[0]", "a string, a token id or an array of token ids", in[0]);
  }
  const bool texts = in[0].is_string();
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string name = "input[" + std::to_string(i) + "]";
    if (texts) {
      if (!in[i].is_string()) return wrong_type(name, "a string (as input[0] is)", in[i]);
      if (in[i].get<std::string>().empty()) return invalid_request("'" + name + "' is an empty string; give some text");
      out.push_back({name, true, in[i].get<std::string>(), {}});
    } else {
      if (!in[i].is_array()) return wrong_type(name, "an array of token ids (as input[0] is)", in[i]);
      auto ids = token_list(in[i], name);
      if (!ids.ok()) return ids.error;
      out.push_back({name, false, {}, std::move(*ids.value)});
    }
  }
  return out;
}

}  // namespace

ApiResult<EmbeddingRequest> parse_embedding_request(const std::string& body) {
  auto parsed = parse_json_object(body);
  if (!parsed.ok()) return parsed.error;
  const ordered_json& j = *parsed.value;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (it->is_null() || name == "input" || name == "model" || name == "encoding_format" || name == "dimensions" ||
        name == "user") {
      continue;
    }
    return invalid_request("'" + name.substr(0, 64) +
                           "' is not a field of /v1/embeddings; the fields are input, model, encoding_format, dimensions, user");
  }
  EmbeddingRequest r;
  auto inputs = parse_input(j);
  if (!inputs.ok()) return inputs.error;
  r.inputs = std::move(*inputs.value);
  auto format = read_string(j, "encoding_format");
  if (!format.ok()) return format.error;
  if (*format.value) {
    const std::string& f = **format.value;
    if (f != "float" && f != "base64") {
      return invalid_request("'encoding_format' is '" + f.substr(0, 64) + "'; allowed: float, base64");
    }
    r.base64 = f == "base64";
  }
  auto dims = read_int(j, "dimensions", 1, int64_t{1} << 24);
  if (!dims.ok()) return dims.error;
  r.dimensions = *dims.value;
  for (const char* name : {"model", "user"}) {
    auto v = read_string(j, name);  // model: replies carry the alias; user: OpenAI platform metadata
    if (!v.ok()) return v.error;
  }
  return r;
}

std::string base64_floats(std::span<const float> v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes;
  bytes.reserve(v.size() * 4);
  for (float f : v) {
    uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<uint8_t>(u >> (8 * b)));  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = uint32_t(bytes[i]) << 16;
    if (n > 1) w |= uint32_t(bytes[i + 1]) << 8;
    if (n > 2) w |= bytes[i + 2];
    out += kAlphabet[(w >> 18) & 63];
    out += kAlphabet[(w >> 12) & 63];
    out += n > 1 ? kAlphabet[(w >> 6) & 63] : '=';
    out += n > 2 ? kAlphabet[w & 63] : '=';
  }
  return out;
}

EmbeddingJob::EmbeddingJob(Engine& engine, int32_t pool, std::string alias, bool base64,
                           std::vector<std::vector<TokenId>> prompts)
    : engine_(engine), pool_(pool), alias_(std::move(alias)), base64_(base64), prompts_(std::move(prompts)),
      handles_(prompts_.size()), vectors_(prompts_.size()) {
  for (const auto& p : prompts_) n_prompt_tokens_ += static_cast<int64_t>(p.size());
}

EmbeddingJob::~EmbeddingJob() { cancel(); }

void EmbeddingJob::cancel() {
  for (auto& h : handles_) {
    if (h) h->cancel();
  }
}

void EmbeddingJob::fail(ApiError error) {
  if (!error_) error_ = std::move(error);
  cancel();
}

void EmbeddingJob::top_up() {
  while (!error_ && next_ < prompts_.size() && n_running_ < kWindow) {
    SequenceRequest seq;
    seq.prompt = prompts_[next_];
    seq.n_predict = 1;  // not used by an embedding engine
    seq.pool = pool_;
    auto handle = engine_.submit(std::move(seq));
    if (!handle.ok()) {
      // The queue is full of others' work: ours that run make room; with none running, give up.
      if (n_running_ == 0) fail({ApiErrorKind::kUnavailable, handle.message()});
      return;
    }
    handles_[next_++] = std::move(*handle);
    ++n_running_;
  }
}

void EmbeddingJob::on_finish(size_t idx, const SequenceEvents& ev) {
  --n_running_;
  ++n_done_;
  prompt_ms_ += ev.stats.prompt_ms;
  switch (ev.reason) {
    case FinishReason::kEnd:
      if (ev.embedding.empty()) return fail({ApiErrorKind::kServer, "internal error: the engine gave no embedding"});
      vectors_[idx] = ev.embedding;
      return;
    case FinishReason::kError:
      return fail({ApiErrorKind::kServer, ev.error});
    case FinishReason::kAborted:
      return fail({ApiErrorKind::kUnavailable, ev.error});
    default:
      return fail({ApiErrorKind::kUnavailable, "the engine stopped before the embedding was done; retry"});
  }
}

bool EmbeddingJob::run_for(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    top_up();
    if (error_ || n_done_ == prompts_.size()) return true;
    bool progressed = false;
    size_t first_running = prompts_.size();
    for (size_t i = 0; i < next_; ++i) {
      if (!handles_[i] || !vectors_[i].empty()) continue;
      const SequenceEvents ev = handles_[i]->wait(0);
      if (ev.finished) {
        handles_[i].reset();  // done: nothing to cancel
        on_finish(i, ev);
        progressed = true;
        if (error_) return true;
      } else if (first_running == prompts_.size()) {
        first_running = i;
      }
    }
    if (progressed) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    // Wait on the oldest running sequence (the others are looked at again soon).
    if (first_running < prompts_.size()) {
      const SequenceEvents ev = handles_[first_running]->wait(static_cast<int>(std::min<int64_t>(left.count(), kPollMs)));
      if (ev.finished) {
        handles_[first_running].reset();
        on_finish(first_running, ev);
      }
    }
  }
}

ApiResult<json> EmbeddingJob::reply() const {
  if (error_) return *error_;
  if (n_done_ != prompts_.size()) return ApiError{ApiErrorKind::kServer, "internal error: the reply was asked for too early"};
  json data = json::array();
  for (size_t i = 0; i < vectors_.size(); ++i) {
    json item = {{"object", "embedding"}, {"index", i}};
    if (base64_) {
      item["embedding"] = base64_floats(vectors_[i]);
    } else {
      item["embedding"] = vectors_[i];
    }
    data.push_back(std::move(item));
  }
  return json{{"object", "list"},
              {"data", std::move(data)},
              {"model", alias_},
              {"usage", {{"prompt_tokens", n_prompt_tokens_}, {"total_tokens", n_prompt_tokens_}}}};
}

EmbeddingService::EmbeddingService(const Tokenizer& tokenizer, Engine& engine, std::string alias, int32_t pool,
                                   int32_t n_embd)
    : tokenizer_(tokenizer), engine_(engine), alias_(std::move(alias)), pool_(pool), n_embd_(n_embd) {
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    max_piece_bytes_ = std::max(max_piece_bytes_, tokenizer.token_to_piece(id).size());
  }
}

ApiResult<std::vector<TokenId>> EmbeddingService::input_tokens(const EmbeddingInput& in) const {
  const int64_t n_ctx = engine_.n_ctx();
  const std::string fix = "; shorten it or raise --ctx-size";
  if (!in.is_text) {
    for (size_t j = 0; j < in.tokens.size(); ++j) {
      if (in.tokens[j] >= tokenizer_.vocab_size()) {
        return invalid_request("'" + in.name + "[" + std::to_string(j) + "]' is " + std::to_string(in.tokens[j]) +
                               "; token ids go from 0 to " + std::to_string(tokenizer_.vocab_size() - 1));
      }
    }
    if (static_cast<int64_t>(in.tokens.size()) > n_ctx) {
      return ApiError{ApiErrorKind::kExceedContext, "'" + in.name + "' has " + std::to_string(in.tokens.size()) +
                                                        " tokens; the context is " + std::to_string(n_ctx) + fix};
    }
    return in.tokens;
  }
  // A text longer than the context's tokens can cover at the vocabulary's longest piece cannot fit:
  // refused before tokenizing it.
  if (in.text.size() > static_cast<size_t>(n_ctx) * std::max<size_t>(max_piece_bytes_, 1)) {
    return ApiError{ApiErrorKind::kExceedContext,
                    "'" + in.name + "' is " + std::to_string(in.text.size()) + " bytes: more tokens than the context of " +
                        std::to_string(n_ctx) + " holds even at the vocabulary's longest token" + fix};
  }
  // As llama-server tokenizes an embedding input: BOS and EOS where the vocabulary asks for them.
  EncodeOptions enc;
  enc.add_bos = tokenizer_.adds_bos();
  enc.add_eos = tokenizer_.adds_eos();
  std::vector<TokenId> ids = tokenizer_.encode(in.text, enc);
  if (ids.empty()) return invalid_request("'" + in.name + "' gives no tokens; give some text");
  if (static_cast<int64_t>(ids.size()) > n_ctx) {
    return ApiError{ApiErrorKind::kExceedContext, "'" + in.name + "' is " + std::to_string(ids.size()) +
                                                      " tokens; the context is " + std::to_string(n_ctx) + fix};
  }
  return ids;
}

ApiResult<std::unique_ptr<EmbeddingJob>> EmbeddingService::start(const std::string& body) {
  auto parsed = parse_embedding_request(body);
  if (!parsed.ok()) return parsed.error;
  const EmbeddingRequest& r = *parsed.value;
  if (r.dimensions && *r.dimensions != n_embd_) {
    return invalid_request("'dimensions' is " + std::to_string(*r.dimensions) + "; this model's embeddings have " +
                           std::to_string(n_embd_) + " dimensions (shortening them is not supported; omit the field)");
  }
  std::vector<std::vector<TokenId>> prompts;
  prompts.reserve(r.inputs.size());
  for (const EmbeddingInput& in : r.inputs) {
    auto ids = input_tokens(in);
    if (!ids.ok()) return ids.error;
    prompts.push_back(std::move(*ids.value));
  }
  auto job = std::make_unique<EmbeddingJob>(engine_, pool_, alias_, r.base64, std::move(prompts));
  job->run_for(0);  // submits the first window: a full queue is a 503 now
  if (job->failed()) return job->reply().error;
  return job;
}

}  // namespace onebit
