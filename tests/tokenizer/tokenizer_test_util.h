// Shared helpers for the tokenizer tests: loading a tokenizer from shared test data and
// reading llama.cpp's ggml-vocab-*.gguf.inp/.out vectors.
#pragma once

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf_reader.h"
#include "testdata.h"
#include "tokenizer/tokenizer.h"

namespace onebit::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Cases as llama.cpp tests/test-tokenizer-0.cpp reads them: the .inp text split on
// "\n__ggml_vocab_test__\n" (the file ends with one), one line of space-separated ids each.
inline std::vector<std::pair<std::string, std::vector<TokenId>>> read_vocab_cases(const std::string& base) {
  const std::string inp = read_file(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < inp.size();) {
    size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(inp.substr(pos));
      break;
    }
    inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(base + ".out");
  std::vector<std::pair<std::string, std::vector<TokenId>>> cases;
  std::string line;
  for (const auto& input : inputs) {
    if (!std::getline(out, line)) break;
    std::istringstream ls(line);
    std::vector<TokenId> ids;
    for (TokenId id; ls >> id;) ids.push_back(id);
    cases.emplace_back(input, ids);
  }
  return cases;
}

// Holds the GGUF mapping alive alongside the tokenizer built from it.
struct LoadedTokenizer {
  std::optional<GgufFile> file;
  std::optional<Tokenizer> tokenizer;
  std::string error;
};

inline LoadedTokenizer load_gguf_tokenizer(const std::string& path) {
  LoadedTokenizer out;
  auto f = GgufFile::open(path);
  if (!f.ok()) {
    out.error = f.message();
    return out;
  }
  out.file.emplace(std::move(f).value());
  auto t = Tokenizer::from_gguf(*out.file);
  if (!t.ok()) {
    out.error = t.message();
    return out;
  }
  out.tokenizer.emplace(std::move(t).value());
  return out;
}

inline std::string ids_to_string(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += " " + std::to_string(id);
  return s;
}

}  // namespace onebit::testing
