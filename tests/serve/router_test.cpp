// Tests of adaptive overflow routing: the primary fills first, overflow balances, places are freed.
#include "serve/router.h"

#include <gtest/gtest.h>

#include <thread>

namespace onebit {
namespace {

TEST(Router, SingleBackendTakesEverything) {
  Router r(1, 2);
  std::vector<std::shared_ptr<Router::Ticket>> held;
  for (int i = 0; i < 5; ++i) held.push_back(r.reserve());
  for (auto& t : held) EXPECT_EQ(t->backend_idx(), 0u);
  EXPECT_EQ(r.counts()[0].in_flight, 5);
}

TEST(Router, PrimaryUntilLimitThenFewestInFlight) {
  Router r(3, 2);
  auto a = r.reserve(), b = r.reserve();
  EXPECT_EQ(a->backend_idx(), 0u);
  EXPECT_EQ(b->backend_idx(), 0u);
  auto c = r.reserve(), d = r.reserve(), e = r.reserve();
  EXPECT_EQ(c->backend_idx(), 1u);
  EXPECT_EQ(d->backend_idx(), 2u);
  EXPECT_EQ(e->backend_idx(), 1u);
  a.reset();  // a place on the primary frees up: the next request goes there again
  EXPECT_EQ(r.reserve()->backend_idx(), 0u);
  auto counts = r.counts();
  EXPECT_EQ(counts[0].in_flight, 1);
  EXPECT_EQ(counts[0].served, 3);
}

TEST(Router, BurstFromManyThreadsRespectsTheLimit) {
  Router r(2, 8);
  std::vector<std::shared_ptr<Router::Ticket>> held(12);
  std::vector<std::thread> threads;
  for (int i = 0; i < 12; ++i) threads.emplace_back([&, i] { held[i] = r.reserve(); });
  for (auto& t : threads) t.join();
  auto counts = r.counts();
  EXPECT_EQ(counts[0].in_flight, 8);
  EXPECT_EQ(counts[1].in_flight, 4);
  held.clear();
  counts = r.counts();
  EXPECT_EQ(counts[0].in_flight + counts[1].in_flight, 0);
}

TEST(Router, UnavailableBackendsArePassedOver) {
  Router r(3, 1);
  r.set_available(0, false);  // the primary hung: everything overflows
  auto a = r.reserve(), b = r.reserve();
  EXPECT_EQ(a->backend_idx(), 1u);
  EXPECT_EQ(b->backend_idx(), 2u);
  r.set_available(1, false);
  r.set_available(2, false);
  EXPECT_EQ(r.reserve(), nullptr);  // none answers
  EXPECT_FALSE(r.any_available());
  r.set_available(0, true);
  auto c = r.reserve(), d = r.reserve();  // over the primary's limit, but no overflow answers
  EXPECT_EQ(c->backend_idx(), 0u);
  EXPECT_EQ(d->backend_idx(), 0u);
  r.set_available(2, true);
  EXPECT_EQ(r.reserve()->backend_idx(), 2u);
  EXPECT_TRUE(r.any_available());
}

}  // namespace
}  // namespace onebit
