// The machine a benchmark ran on: CPU model (/proc/cpuinfo), the SIMD features we detect
// (base/cpu_features), cores, memory (/proc/meminfo), GPUs (nvidia-smi when present), and
// optionally a measured memory read bandwidth.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace onebit {

struct MachineInfo {
  std::string cpu_model;               // "Intel(R) Xeon(R) ..."; "unknown" when not found
  std::vector<std::string> cpu_flags;  // ours: avx2, fma, f16c, avx512f, ..., avx_vnni
  std::string cpu_isa;                 // the kernels' target: avx2, avx512_vnni, ...
  int cores = 0;                       // logical CPUs we may run on
  uint64_t mem_total_bytes = 0;        // MemTotal
  std::vector<std::string> gpus;       // "NVIDIA H100 80GB HBM3, 81559 MiB"
  std::optional<double> read_gb_s;    // measured when asked
  std::string os;                      // uname: "Linux 6.1.0 x86_64"
  std::string load_average;            // /proc/loadavg's first three numbers
};

// Describes this machine; with `measure_bandwidth`, runs the read bandwidth test (a few seconds).
MachineInfo describe_machine(bool measure_bandwidth);

// Streaming read of a 1 GiB buffer on every core, best of three, in GB/s (1e9 bytes).
double measure_read_bandwidth_gb_s();

// {"cpu_model", "cpu_flags", "cpu_isa", "cores", "mem_total_bytes", "gpus", "read_gb_s" (or null), "os", "load_average"}.
nlohmann::json machine_json(const MachineInfo& m);

// One line: "Intel Xeon ... (avx2 fma ...), 2 cores, 23.4 GiB RAM, no NVIDIA GPU, load 0.42 0.82 1.37".
std::string machine_summary(const MachineInfo& m);

// The "model name" of the first processor in a /proc/cpuinfo text, or "unknown".
std::string cpu_model_from_cpuinfo(const std::string& cpuinfo);

}  // namespace onebit
