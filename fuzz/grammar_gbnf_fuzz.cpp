// libFuzzer target for what a request may send as a constraint: GBNF (the `grammar` field) and
// JSON schemas (response_format, json_schema). Any bytes give a grammar or an error, never a
// crash or a hang; a grammar that parses is compiled over a byte vocabulary and walked over the
// rest of the input with its masks (the matcher must stay finite on any grammar that parses).
// The first byte chooses: even = GBNF, odd = JSON schema.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace {

std::shared_ptr<const onebit::grammar::TokenTable> byte_table() {
  static auto table = [] {
    std::vector<std::string> pieces;
    std::vector<uint8_t> flags;
    for (int b = 0; b < 256; ++b) {
      pieces.emplace_back(1, char(b));
      flags.push_back(onebit::grammar::TokenTable::kText);
    }
    pieces.emplace_back("ab");
    flags.push_back(onebit::grammar::TokenTable::kText);
    pieces.emplace_back("");
    flags.push_back(onebit::grammar::TokenTable::kEnd);
    return std::make_shared<const onebit::grammar::TokenTable>(pieces, flags);
  }();
  return table;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool schema = data[0] & 1;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  // The text to walk follows a NUL.
  const size_t nul = rest.find('\0');
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  rest = rest.substr(0, nul);
  std::string gbnf;
  if (schema) {
    auto j = nlohmann::ordered_json::parse(rest, nullptr, false);
    if (j.is_discarded()) return 0;
    auto r = onebit::grammar::json_schema_to_gbnf(j);
    if (!r.ok()) return 0;
    gbnf = *r;
  } else {
    gbnf = std::string(rest);
  }
  auto g = onebit::grammar::parse_gbnf(gbnf);
  if (!g.ok()) return 0;
  auto compiled = std::make_shared<onebit::grammar::CompiledGrammar>(std::move(*g), byte_table());
  onebit::grammar::GrammarConstraint con(compiled);
  std::vector<float> logits(258, 0.0f);
  for (size_t i = 0; i < text.size() && i < 64 && !con.finished(); ++i) {
    con.mask(logits, int32_t(64 - i));
    con.accept(static_cast<uint8_t>(text[i]));
    compiled->min_chars_to_end(con.state());
  }
  return 0;
}
