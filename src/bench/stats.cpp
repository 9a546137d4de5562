// Benchmark statistics; see stats.h.
#include "bench/stats.h"

#include <algorithm>

#include "base/check.h"

namespace onebit {

double burst_tokens_per_second(const std::vector<StreamEnd>& streams) {
  int64_t tokens = 0;
  double wall_ms = 0.0;
  for (const StreamEnd& s : streams) {
    tokens += s.tokens;
    wall_ms = std::max(wall_ms, s.end_ms);
  }
  return wall_ms > 0.0 ? static_cast<double>(tokens) / (wall_ms / 1000.0) : 0.0;
}

double median_of(std::vector<double> values) {
  ONEBIT_CHECK(!values.empty());
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

std::optional<CellStats> cell_stats(const std::vector<Sample>& samples, const Metric& metric, const std::string& config) {
  std::vector<double> values;
  for (const auto& s : samples) {
    if (s.metric == metric.key && s.config == config) values.push_back(s.value);
  }
  if (values.empty()) return std::nullopt;
  CellStats c;
  c.n = values.size();
  c.best = metric.higher_is_better ? *std::max_element(values.begin(), values.end())
                                   : *std::min_element(values.begin(), values.end());
  c.median = median_of(std::move(values));
  return c;
}

std::vector<SummaryRow> summarize(const std::vector<Sample>& samples, const std::vector<Metric>& metrics,
                                  const std::vector<std::string>& configs) {
  std::vector<SummaryRow> rows;
  for (const auto& m : metrics) {
    SummaryRow row{m, {}};
    bool any = false;
    for (const auto& c : configs) {
      row.cells.push_back(cell_stats(samples, m, c));
      any = any || row.cells.back().has_value();
    }
    if (!any) continue;
    const std::optional<CellStats> base = row.cells.empty() ? std::nullopt : row.cells[0];
    for (size_t i = 1; i < row.cells.size(); ++i) {
      if (row.cells[i] && base && base->median != 0.0) {
        row.cells[i]->change_pct = (row.cells[i]->median / base->median - 1.0) * 100.0;
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace onebit
