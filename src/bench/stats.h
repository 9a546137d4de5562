// Benchmark statistics: the samples one measurement gave, summarized per metric and configuration
// as best and median, and the change of a configuration against the baseline on the median.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace onebit {

// One raw measurement.
struct Sample {
  std::string config;    // the configuration's name
  int round = 0;         // 1-based
  int run = 0;           // 1-based within the round (1 for a concurrency level)
  std::string metric;    // a Metric key: "decode_code", "concurrency_tps_4"
  double value = 0.0;
  nlohmann::json raw;    // what the server said (usage, timings) and what we timed
};

// One row of the table: what is measured and which way is better.
struct Metric {
  std::string key;          // "decode_prose"
  std::string label;        // "decode tok/s, prose"
  bool higher_is_better = true;
};

struct CellStats {
  size_t n = 0;
  double best = 0.0;        // the maximum, or the minimum when lower is better
  double median = 0.0;      // the middle value; the mean of the two middle values for an even count
  std::optional<double> change_pct;  // (median / baseline median - 1) * 100; none for the baseline
};

struct SummaryRow {
  Metric metric;
  std::vector<std::optional<CellStats>> cells;  // one per configuration, in order; none: no samples
};

// One request of a concurrency burst: its completion tokens and when its stream ended, in ms
// after the moment all of the burst's requests were released.
struct StreamEnd {
  int64_t tokens = 0;
  double end_ms = 0.0;
};

// Total tokens/s of a burst: all its requests' tokens over the time from the release to the last
// end; 0 for an empty burst or no elapsed time.
double burst_tokens_per_second(const std::vector<StreamEnd>& streams);

// The median of `values` (not empty).
double median_of(std::vector<double> values);

// Best and median of one metric's samples for one configuration; nullopt when there are none.
std::optional<CellStats> cell_stats(const std::vector<Sample>& samples, const Metric& metric, const std::string& config);

// One row per metric that has samples (in the order of `metrics`), one cell per configuration
// (in the order of `configs`; the first is the baseline).
std::vector<SummaryRow> summarize(const std::vector<Sample>& samples, const std::vector<Metric>& metrics,
                                  const std::vector<std::string>& configs);

}  // namespace onebit
