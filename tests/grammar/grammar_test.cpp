// GBNF parsing (errors name what is wrong and where) and the matcher: acceptance of whole texts
// against std::regex on grammars with a regular equivalent, the cached token mask against a
// token-by-token walk on real vocabularies, and UTF-8 split across byte tokens.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "testdata.h"
#include "tokenizer/hf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace onebit::grammar {
namespace {

std::string parse_error(const std::string& text) {
  auto g = parse_gbnf(text);
  return g.ok() ? "" : g.message();
}

TEST(Gbnf, ErrorsNameWhatAndWhere) {
  EXPECT_NE(parse_error("root ::= foo").find("rule 'foo' is used at line 1, column 10 but never defined"), std::string::npos)
      << parse_error("root ::= foo");
  EXPECT_NE(parse_error("item ::= \"x\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(parse_error("root ::= root \"x\" | \"y\"").find("left recursion (root -> root)"), std::string::npos);
  EXPECT_NE(parse_error("root ::= a \"x\"\na ::= b?\nb ::= root").find("left recursion"), std::string::npos)
      << parse_error("root ::= a \"x\"\na ::= b?\nb ::= root");
  EXPECT_NE(parse_error("root ::= \"abc").find("'\"' to close the literal"), std::string::npos);
  EXPECT_NE(parse_error("root ::= [a-").find("']' to close the character class"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"\\q\"").find("a known escape"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"x\"{3,1}").find("max < min"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"x\"{99999}").find("over 1024"), std::string::npos);
  EXPECT_NE(parse_error("root ::= " + std::string(100, '(') + "\"x\"" + std::string(100, ')')).find("nest deeper than 64"), std::string::npos);
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 9000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  EXPECT_NE(parse_error(chain).find("more than 8192 rules"), std::string::npos);
  EXPECT_NE(parse_error("root ::= * \"x\"").find("something to repeat"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"x\"\nroot ::= \"y\"").find("defined twice"), std::string::npos);
  EXPECT_NE(parse_error("root ::= [z-a]").find("ends below its start"), std::string::npos);
  EXPECT_NE(parse_error("root ::= (\"x\"").find("')' to close the group"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"x\" # comment\n  | \"y\"").find("expected a rule name ([a-zA-Z0-9_-]+) at line 2, column 3, found '|'"),
            std::string::npos);
}

TEST(Gbnf, LineStructure) {
  EXPECT_EQ(parse_error("root ::= a |\n  b\na ::= \"a\"\nb ::= (\n  \"b\"\n  \"c\" )\n"), "");
  EXPECT_NE(parse_error("root ::= \"a\"\n| \"b\""), "");  // a new line ends a rule outside parentheses
  auto g = parse_gbnf("root ::= \"a\"+ [^\\n\\x00-\\x1F] . x{2,3}\nx ::= [0-9]");
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_GE(g->rules.size(), 3u);
}

// Whole-text acceptance, the way the engine walks it.
bool accepts(CompiledGrammar& c, const std::string& text) {
  MatchState s;
  return c.advance(c.start(), text, s) && c.can_end(s);
}

std::shared_ptr<const TokenTable> byte_table() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, char(b));
  return std::make_shared<const TokenTable>(pieces, std::vector<uint8_t>(256, TokenTable::kText));
}

TEST(Matcher, AcceptsWhatStdRegexAccepts) {
  struct Case {
    const char* gbnf;
    const char* regex;
    const char* alphabet;
  };
  const Case cases[] = {
      {R"(root ::= [a-c]+ ("x" | "yz")? [0-9]{2,3})", "[a-c]+(x|yz)?[0-9]{2,3}", "abcxyz0123"},
      {R"(root ::= ("ab" | "a") ("bc" | "c")*)", "(ab|a)(bc|c)*", "abc"},
      {R"(root ::= item ("," item)*
item ::= [^,\n]{1,2})", "[^,\\n]{1,2}(,[^,\\n]{1,2})*", "ab,\n"},
      {R"(root ::= "x"{0,3} "y"{2,} z?
z ::= "q" | )", "x{0,3}y{2,}q?", "xyq"},
      {R"(root ::= (a b)+
a ::= "1"?
b ::= "2" | "3" a)", "(1?(2|31?))+", "123"},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    auto g = parse_gbnf(c.gbnf);
    ASSERT_TRUE(g.ok()) << g.message();
    CompiledGrammar compiled(std::move(*g), byte_table());
    const std::regex re(c.regex);
    const std::string alphabet = c.alphabet;
    int n_accepted = 0;
    for (int i = 0; i < 4000; ++i) {
      std::string text;
      const int len = int(rng() % 9);
      for (int k = 0; k < len; ++k) text += alphabet[rng() % alphabet.size()];
      const bool want = std::regex_match(text, re);
      n_accepted += want;
      ASSERT_EQ(accepts(compiled, text), want) << c.gbnf << " on '" << text << "'";
    }
    EXPECT_GT(n_accepted, 20) << c.gbnf << ": too few accepted samples to mean anything";
  }
}

// The mask by the shared-prefix walk equals each token advanced alone (with the pending-character
// check), on a state reached by a random walk.
void check_masks_against_token_walk(const Tokenizer& tok, const std::string& gbnf, int steps, uint64_t seed) {
  auto g = parse_gbnf(gbnf);
  ASSERT_TRUE(g.ok()) << g.message();
  auto table = TokenTable::from_tokenizer(tok);
  auto compiled = std::make_shared<CompiledGrammar>(std::move(*g), table);
  GrammarConstraint con(compiled);
  std::mt19937_64 rng(seed);
  std::string text;
  for (int step = 0; step < steps && !con.finished(); ++step) {
    const auto bits = compiled->mask(con.state());
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < table->size(); ++id) {
      const bool bit = ((*bits)[size_t(id) / 64] >> (id % 64)) & 1;
      // The reference: this token alone, from this state.
      bool want = false;
      if (table->flags(id) & TokenTable::kEnd) {
        want = compiled->can_end(con.state());
      } else if ((table->flags(id) & TokenTable::kText) && !table->piece(id).empty()) {
        MatchState next;
        if (compiled->advance(con.state(), table->piece(id), next)) {
          // A pending character must have a completion: try every continuation byte sequence.
          want = next.partial == 0;
          if (!want) {
            for (uint32_t b1 = 0x80; b1 <= 0xBF && !want; ++b1) {
              MatchState n2;
              const std::string one(1, char(b1));
              if (!compiled->advance(next, one, n2)) continue;
              if (n2.partial == 0) {
                want = true;
                break;
              }
              for (uint32_t b2 = 0x80; b2 <= 0xBF && !want; ++b2) {
                MatchState n3;
                if (!compiled->advance(n2, std::string(1, char(b2)), n3)) continue;
                if (n3.partial == 0) want = true;
                for (uint32_t b3 = 0x80; b3 <= 0xBF && !want && n3.partial != 0; ++b3) {
                  MatchState n4;
                  want = compiled->advance(n3, std::string(1, char(b3)), n4) && n4.partial == 0;
                }
              }
            }
          }
        }
      }
      ASSERT_EQ(bit, want) << "token " << id << " '" << table->piece(id) << "' after '" << text << "'";
      if (bit) allowed.push_back(id);
    }
    ASSERT_FALSE(allowed.empty()) << "dead end after '" << text << "'";
    // Prefer short tokens so that the walk reaches structure, not one long string.
    int32_t pick = allowed[rng() % allowed.size()];
    for (int t = 0; t < 3 && table->piece(pick).size() > 2; ++t) pick = allowed[rng() % allowed.size()];
    ASSERT_TRUE(con.accept(pick));
    if (!(table->flags(pick) & TokenTable::kEnd)) text += table->piece(pick);
  }
}

const char* kJsonish = R"(root ::= "{" ws "\"k\"" ws ":" ws value ws "}"
value ::= string | [0-9]+ | "[" ws (value ("," ws value)*)? ws "]"
string ::= "\"" ([^"\\\x00-\x1F] | "\\" ["\\/bfnrt])* "\""
ws ::= [ \n]?)";

TEST(Matcher, MaskEqualsTokenByTokenOnSpmVocab) {
  ONEBIT_REQUIRE_TESTDATA("vocab/ggml-vocab-llama-spm.gguf");
  auto file = GgufFile::open(testing::testdata_path("vocab/ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(file.ok()) << file.message();
  auto tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.message();
#ifdef ONEBIT_SANITIZED
  check_masks_against_token_walk(*tok, kJsonish, 3, 1);
  return;
#endif
  check_masks_against_token_walk(*tok, kJsonish, 12, 1);
  check_masks_against_token_walk(*tok, "root ::= [\\u00e9\\u4e2d-\\u4e2f\\U0001F600]{1,6} \"!\"", 8, 2);
}

TEST(Matcher, MaskEqualsTokenByTokenOnByteLevelVocab) {
  ONEBIT_REQUIRE_TESTDATA("tokenizers/qwen3/tokenizer.json");
  auto hf = read_hf_tokenizer(testing::testdata_path("tokenizers/qwen3/tokenizer.json"));
  ASSERT_TRUE(hf.ok()) << hf.message();
  auto tok = Tokenizer::from_vocab(hf->vocab);
  ASSERT_TRUE(tok.ok()) << tok.message();
#ifdef ONEBIT_SANITIZED
  check_masks_against_token_walk(*tok, kJsonish, 3, 3);  // the reference walk is slow under a sanitizer
  return;
#endif
  check_masks_against_token_walk(*tok, kJsonish, 10, 3);
  // Characters split over byte-level tokens: every token of a 3- or 4-byte character's bytes.
  check_masks_against_token_walk(*tok, "root ::= [\\u4e2d\\U0001F600]{1,4} \"!\"", 8, 4);
}

TEST(Matcher, FinishedAndEnd) {
  auto g = parse_gbnf("root ::= \"ab\" \"c\"?");
  ASSERT_TRUE(g.ok());
  std::vector<std::string> pieces = {"a", "b", "c", "abc", "", "x"};
  std::vector<uint8_t> flags(pieces.size(), TokenTable::kText);
  flags[4] = TokenTable::kEnd;
  auto compiled = std::make_shared<CompiledGrammar>(std::move(*g), std::make_shared<const TokenTable>(pieces, flags));
  GrammarConstraint con(compiled);
  std::vector<float> logits(6, 0.0f);
  EXPECT_EQ(con.mask(logits, 1000), 2);  // "a", "abc"
  EXPECT_FALSE(con.accept(5));
  EXPECT_FALSE(con.accept(4));  // the end is not allowed yet
  EXPECT_TRUE(con.accept(0));
  EXPECT_TRUE(con.accept(1));
  EXPECT_FALSE(con.finished());  // "c" may follow
  std::vector<float> l2(6, 0.0f);
  EXPECT_EQ(con.mask(l2, 1000), 2);  // "c" and the end
  EXPECT_TRUE(std::isinf(l2[0]) && !std::isinf(l2[2]) && !std::isinf(l2[4]));
  EXPECT_TRUE(con.accept(2));
  EXPECT_TRUE(con.finished());
  GrammarConstraint whole(compiled);
  EXPECT_TRUE(whole.accept(3));
  EXPECT_TRUE(whole.finished());
  EXPECT_EQ(compiled->min_chars_to_end(compiled->start()), 2);
}

}  // namespace
}  // namespace onebit::grammar
