// libFuzzer target for the HTTP request parser: any bytes give requests or an error, never a
// crash, and the same bytes fed whole and one at a time give the same requests and the same error
// (the parser's answer must not depend on how the network splits its input).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "http/request_parser.h"

namespace {

using onebit::http::ParseResult;
using onebit::http::ParserLimits;
using onebit::http::RequestParser;

// Every request the bytes hold, then the final state: "E<status>" or "M" (more needed).
std::vector<std::string> outcomes(std::string_view bytes, size_t piece) {
  RequestParser p(ParserLimits{.max_head_bytes = 512, .max_headers = 8, .max_body_bytes = 1024});
  std::vector<std::string> out;
  for (size_t at = 0; at < bytes.size() || at == 0; at += piece) {
    p.append(bytes.substr(at, piece));
    for (;;) {
      const ParseResult r = p.parse();
      if (r == ParseResult::kComplete) {
        auto req = p.take();
        std::string s = req.method + " " + req.path + " ?" + req.query + " 1." + std::to_string(req.minor_version);
        for (const auto& [n, v] : req.headers.fields()) s += "|" + n + ":" + v;
        out.push_back(s + "|" + req.body);
        if (out.size() > 64) return out;
        continue;
      }
      if (r == ParseResult::kError) {
        if (p.error_message().empty() || p.error_status() < 400 || p.error_status() > 599) std::abort();
        out.push_back("E" + std::to_string(p.error_status()));
        return out;
      }
      break;
    }
    if (bytes.empty()) break;
  }
  out.push_back("M");
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto whole = outcomes(bytes, bytes.size() + 1);
  const auto bytewise = outcomes(bytes, 1);
  if (whole != bytewise) std::abort();
  return 0;
}
