// A browser-style client (issue 15): CORS preflights and cross-origin requests, with and without
// --api-key, and --cors-origin restricting the origins. The rules are the Fetch standard's: a
// preflight (OPTIONS with Access-Control-Request-*) must get a 2xx with Allow-Origin, -Methods and
// -Headers covering the request, and the reply itself an Allow-Origin the page's origin matches.
#include <gtest/gtest.h>

#include "e2e_util.h"
#include "run_command.h"

namespace onebit::e2e {
namespace {

const std::string kPage = "http://localhost:3000";
const std::string kChat = R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"temperature":0})";

httplib::Headers preflight_headers(const std::string& origin) {
  return {{"Origin", origin},
          {"Access-Control-Request-Method", "POST"},
          {"Access-Control-Request-Headers", "authorization, content-type"}};
}

TEST(Cors, PreflightAndCrossOriginRequestsWithAndWithoutAKey) {
  for (const bool keyed : {false, true}) {
    SCOPED_TRACE(keyed ? "with --api-key" : "without a key");
    Server server;
    server.start(onebit_model(), keyed ? std::vector<std::string>{"--api-key", "sekret"} : std::vector<std::string>{});
    auto c = server.client();
    // The preflight needs no key: browsers never send one with it.
    auto pre = c.Options("/v1/chat/completions", preflight_headers(kPage));
    ASSERT_TRUE(pre);
    EXPECT_EQ(pre->status, 204);
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "*");
    EXPECT_NE(pre->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
    EXPECT_FALSE(pre->has_header("Content-Length"));  // a 204 has none (RFC 9110)
    // The request itself, from the page.
    httplib::Headers h = {{"Origin", kPage}};
    if (keyed) h.emplace("Authorization", "Bearer sekret");
    auto r = c.Post("/v1/chat/completions", h, kChat, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
    // A streamed reply carries it too.
    auto s = c.Post("/v1/chat/completions", h, R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"stream":true})",
                    "application/json");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->get_header_value("Access-Control-Allow-Origin"), "*");
    if (keyed) {  // the page can read why it was refused
      auto denied = c.Post("/v1/chat/completions", {{"Origin", kPage}}, kChat, "application/json");
      ASSERT_TRUE(denied);
      EXPECT_EQ(denied->status, 401);
      EXPECT_EQ(denied->get_header_value("Access-Control-Allow-Origin"), "*");
    }
    auto unknown = c.Options("/v1/nothing", preflight_headers(kPage));
    ASSERT_TRUE(unknown);
    EXPECT_EQ(unknown->status, 404);
    // Same-origin and non-browser clients get no CORS headers they did not ask for.
    auto plain = c.Get("/v1/models", keyed ? httplib::Headers{{"Authorization", "Bearer sekret"}} : httplib::Headers{});
    ASSERT_TRUE(plain);
    EXPECT_FALSE(plain->has_header("Access-Control-Allow-Origin"));
  }
}

TEST(Cors, CorsOriginRestrictsThePagesThatMayRead) {
  Server server;
  server.start(onebit_model(), {"--cors-origin", "http://a.example", "--cors-origin", kPage});
  auto c = server.client();
  auto ok = c.Options("/v1/completions", preflight_headers("http://a.example"));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 204);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "http://a.example");
  EXPECT_EQ(ok->get_header_value("Vary"), "Origin");
  auto other = c.Options("/v1/completions", preflight_headers("http://evil.example"));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 403);
  EXPECT_NE(other->body.find("--cors-origin http://evil.example"), std::string::npos) << other->body;
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
  // A request from an origin not listed is answered, but without the header the browser needs.
  auto r = c.Post("/v1/completions", {{"Origin", "http://evil.example"}}, R"({"prompt":"Hi","max_tokens":1})",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  auto mine = c.Post("/v1/completions", {{"Origin", kPage}}, R"({"prompt":"Hi","max_tokens":1})", "application/json");
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->get_header_value("Access-Control-Allow-Origin"), kPage);
}

TEST(Cors, BadCorsOriginIsAClearError) {
  for (const char* bad : {"localhost:3000", "http://a.example/"}) {
    auto r = testing::run_command(testing::binary_path() + " serve -m " + onebit_model() + " --cors-origin " + bad + " --dry-run");
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("--cors-origin"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace onebit::e2e
