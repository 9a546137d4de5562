// Tokenizer: text <-> token ids, exactly as Hugging Face `tokenizers` does for the same vocabulary,
// built from a GGUF's `tokenizer.ggml.*` metadata. Knows nothing of models or HTTP.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_reader.h"

namespace onebit {

using TokenId = int32_t;

// Token attributes from `tokenizer.ggml.token_type` (llama.cpp's llama_token_type values).
enum class TokenKind : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct EncodeOptions {
  bool add_bos = false;        // prepend BOS (only if the vocabulary has one)
  bool add_eos = false;        // append EOS
  bool parse_special = true;   // split out control/user-defined tokens written in the text
};

class TokenizerImpl;
struct VocabData;

// Immutable after construction; encode/decode are safe to call from many threads.
class Tokenizer {
 public:
  // Builds the tokenizer from a GGUF's tokenizer.ggml.* keys (copied: `file` may be closed after).
  // Errors name the key and value (e.g. an unsupported tokenizer.ggml.pre) and what is supported.
  static Result<Tokenizer> from_gguf(const GgufFile& file);
  // Builds the tokenizer from an in-memory vocabulary (tokenizer/vocab.h); validates it the same way.
  static Result<Tokenizer> from_vocab(const VocabData& vocab);

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Concatenated bytes of the tokens (byte tokens decoded, SentencePiece spaces restored).
  // `skip_special` drops control tokens. May end in an incomplete UTF-8 sequence.
  std::string decode(const std::vector<TokenId>& ids, bool skip_special = false) const;
  // The bytes one token stands for (as decode would produce it in the middle of a text).
  std::string token_to_piece(TokenId id) const;
  // The raw vocabulary string of a token (as stored in the GGUF).
  std::string_view token_text(TokenId id) const;

  int32_t vocab_size() const;
  TokenKind kind(TokenId id) const;
  TokenId bos_id() const;  // -1 when none
  TokenId eos_id() const;  // -1 when none
  // True for tokens that end generation: eos, eot, and control tokens such as <|im_end|>,
  // <|eot_id|>, <|endoftext|>.
  bool is_end_of_generation(TokenId id) const;
  // Whether the GGUF asks for BOS/EOS to be added (tokenizer.ggml.add_bos_token / add_eos_token).
  bool adds_bos() const;
  bool adds_eos() const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

// A prompt rendered by a chat template as tokens: BOS first when the vocabulary adds one, unless
// the template already wrote the BOS text at the start (no second BOS); special tokens parsed.
std::vector<TokenId> encode_rendered_chat(const Tokenizer& tokenizer, std::string_view rendered);

}  // namespace onebit
