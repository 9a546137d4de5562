// The request parser against RFC 9112's framing rules: whole and byte-by-byte input, pipelining,
// chunked bodies, and every malformed or oversized case answered with its status.
#include "http/request_parser.h"

#include <gtest/gtest.h>

namespace onebit::http {
namespace {

struct Parsed {
  ParseResult result;
  RequestParser parser;
};

// Feeds `bytes` at once, or one byte at a time.
ParseResult feed(RequestParser& p, std::string_view bytes, bool bytewise) {
  if (!bytewise) {
    p.append(bytes);
    return p.parse();
  }
  ParseResult r = p.parse();
  for (char c : bytes) {
    p.append(std::string_view(&c, 1));
    r = p.parse();
    if (r != ParseResult::kNeedMore) return r;
  }
  return r;
}

class ParserTest : public ::testing::TestWithParam<bool> {};

TEST_P(ParserTest, SimpleGet) {
  RequestParser p;
  ASSERT_EQ(feed(p, "GET /v1/models?x=1&y=%20 HTTP/1.1\r\nHost: localhost:8000\r\nX-A:  b c \r\n\r\n", GetParam()),
            ParseResult::kComplete);
  Request r = p.take();
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/v1/models?x=1&y=%20");
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "x=1&y=%20");
  EXPECT_EQ(r.minor_version, 1);
  EXPECT_EQ(r.get_header_value("host"), "localhost:8000");
  EXPECT_EQ(r.get_header_value("x-a"), "b c");  // optional whitespace trimmed, inner kept
  EXPECT_TRUE(r.body.empty());
  EXPECT_EQ(p.buffered(), 0u);
}

TEST_P(ParserTest, ContentLengthBodyAndPipelining) {
  RequestParser p;
  const std::string two =
      "POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world"
      "POST /a%2Fb HTTP/1.1\r\nHost: h\r\ncontent-length: 3\r\n\r\nabc"
      "GET /c HTTP/1.0\r\n\r\n";
  ASSERT_EQ(feed(p, two, GetParam()), ParseResult::kComplete);
  Request a = p.take();
  EXPECT_EQ(a.body, "hello world");
  if (GetParam()) {  // bytewise feeding stopped at the first request; the rest was never fed
    return;
  }
  ASSERT_EQ(p.parse(), ParseResult::kComplete);
  Request b = p.take();
  EXPECT_EQ(b.path, "/a/b");
  EXPECT_EQ(b.body, "abc");
  ASSERT_EQ(p.parse(), ParseResult::kComplete);
  Request c = p.take();
  EXPECT_EQ(c.path, "/c");
  EXPECT_EQ(c.minor_version, 0);  // HTTP/1.0 needs no Host
  EXPECT_EQ(p.parse(), ParseResult::kNeedMore);
  EXPECT_FALSE(p.started());
}

TEST_P(ParserTest, ChunkedBody) {
  RequestParser p;
  ASSERT_EQ(feed(p,
                 "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n"
                 "5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nTrailer: x\r\n\r\n",
                 GetParam()),
            ParseResult::kComplete);
  EXPECT_EQ(p.take().body, "helloabcdefghijklmnopqrstuvwxyz");
}

TEST_P(ParserTest, BareLineFeedsAndLeadingEmptyLines) {
  RequestParser p;
  ASSERT_EQ(feed(p, "\r\n\nGET / HTTP/1.1\nHost: h\n\n", GetParam()), ParseResult::kComplete);
  EXPECT_EQ(p.take().path, "/");
}

TEST_P(ParserTest, ExpectContinue) {
  RequestParser p;
  EXPECT_EQ(feed(p, "POST /x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n", GetParam()),
            ParseResult::kNeedMore);
  EXPECT_TRUE(p.head_done());
  EXPECT_TRUE(p.wants_continue());
  p.continue_sent();
  EXPECT_FALSE(p.wants_continue());
  p.append("ok");
  ASSERT_EQ(p.parse(), ParseResult::kComplete);
  EXPECT_EQ(p.take().body, "ok");
}

INSTANTIATE_TEST_SUITE_P(WholeAndBytewise, ParserTest, ::testing::Bool());

struct BadCase {
  const char* name;
  std::string bytes;
  int status;
};

TEST(ParserErrors, EachMalformedCaseHasItsStatus) {
  const std::string big_header = "GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(20000, 'a') + "\r\n\r\n";
  std::string many = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (int i = 0; i < 101; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  many += "\r\n";
  const std::vector<BadCase> cases = {
      {"no version", "GET /\r\nHost: h\r\n\r\n", 400},
      {"extra space", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"bad method", "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"http/2", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505},
      {"http/0.9 style", "GET / HTTP/1\r\n\r\n", 400},
      {"bad target", "GET v1/models HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"star not options", "GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"bad escape", "GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"nul escape", "GET /a%00 HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"no host", "GET / HTTP/1.1\r\n\r\n", 400},
      {"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"space before colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400},
      {"no colon", "GET / HTTP/1.1\r\nHost: h\r\nJunk\r\n\r\n", 400},
      {"folded", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", 400},
      {"ctl in value", std::string("GET / HTTP/1.1\r\nHost: h\r\nX: a\x01") + "b\r\n\r\n", 400},
      {"bare cr", "GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n", 400},
      {"cl and te", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"two lengths", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
      {"negative length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400},
      {"list length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\nabc", 400},
      {"huge length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
      {"too long", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 16777217\r\n\r\n", 413},
      {"gzip te", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"two te", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"bad chunk size", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"chunk too long", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", 400},
      {"chunks too big", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1000001\r\n", 413},
      {"expect other", "POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n", 417},
      {"header too large", big_header, 431},
      {"too many headers", many, 431},
  };
  for (const BadCase& c : cases) {
    for (bool bytewise : {false, true}) {
      RequestParser p;
      EXPECT_EQ(feed(p, c.bytes, bytewise), ParseResult::kError) << c.name << (bytewise ? " (bytewise)" : "");
      EXPECT_EQ(p.error_status(), c.status) << c.name << ": " << p.error_message();
      EXPECT_FALSE(p.error_message().empty()) << c.name;
    }
  }
}

TEST(ParserErrors, OversizedHeadIsRefusedBeforeItEnds) {
  // A head that never ends is refused once it passes the limit, not buffered without bound.
  RequestParser p;
  p.append("GET / HTTP/1.1\r\nHost: h\r\nX: ");
  EXPECT_EQ(p.parse(), ParseResult::kNeedMore);
  p.append(std::string(20000, 'a'));
  EXPECT_EQ(p.parse(), ParseResult::kError);
  EXPECT_EQ(p.error_status(), 431);
}

TEST(ParserLimits, EndlessEmptyLinesKeepMemoryFlat) {
  RequestParser p;
  for (int i = 0; i < 10000; ++i) {
    p.append("\r\n\r\n\r\n\r\n");
    ASSERT_EQ(p.parse(), ParseResult::kNeedMore);
  }
  EXPECT_EQ(p.buffered(), 0u);
  EXPECT_FALSE(p.started());
}

TEST(ParserLimits, CustomLimits) {
  RequestParser p(ParserLimits{.max_head_bytes = 64, .max_headers = 2, .max_body_bytes = 4});
  p.append("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(p.parse(), ParseResult::kError);
  EXPECT_EQ(p.error_status(), 413);
}

}  // namespace
}  // namespace onebit::http
