// The machine description; see machine.h.
#include "bench/machine.h"

#include <sched.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/cpu_features.h"

namespace onebit {
namespace {

std::string read_text(const char* path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  const char* blanks = " \t\r\n";
  const size_t first = s.find_first_not_of(blanks);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(blanks) - first + 1);
}

uint64_t mem_total_bytes() {
  std::istringstream in(read_text("/proc/meminfo"));
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return 0;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<std::string> our_cpu_flags() {
  const CpuFeatures& f = cpu_features();
  std::vector<std::string> out;
  const std::pair<const char*, bool> flags[] = {
      {"avx2", f.avx2},         {"fma", f.fma},           {"f16c", f.f16c},
      {"avx512f", f.avx512f},   {"avx512bw", f.avx512bw}, {"avx512vl", f.avx512vl},
      {"avx512vnni", f.avx512vnni}, {"avx512bf16", f.avx512bf16}, {"avx_vnni", f.avx_vnni}};
  for (const auto& [name, on] : flags) {
    if (on) out.emplace_back(name);
  }
  return out;
}

// "name, memory" lines of nvidia-smi when it is on PATH; none otherwise.
std::vector<std::string> nvidia_gpus() {
  std::vector<std::string> out;
  FILE* p = ::popen("command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null", "r");
  if (p == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    std::string s = trim(line);
    if (!s.empty()) out.push_back(s);
  }
  ::pclose(p);
  return out;
}

std::string uname_text() {
  utsname u{};
  if (::uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.release + " " + u.machine;
}

std::string load_average() {
  std::istringstream in(read_text("/proc/loadavg"));
  std::string a, b, c;
  in >> a >> b >> c;
  return a.empty() ? "unknown" : a + " " + b + " " + c;
}

// Sums words [begin, end): four independent sums so the compiler streams with wide loads.
uint64_t sum_words(const uint64_t* begin, const uint64_t* end) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  const uint64_t* p = begin;
  for (; p + 4 <= end; p += 4) {
    s0 += p[0];
    s1 += p[1];
    s2 += p[2];
    s3 += p[3];
  }
  for (; p < end; ++p) s0 += *p;
  return s0 + s1 + s2 + s3;
}

}  // namespace

std::string cpu_model_from_cpuinfo(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = trim(line.substr(colon + 1));
        if (!v.empty()) return v;
      }
    }
  }
  return "unknown";
}

double measure_read_bandwidth_gb_s() {
  constexpr size_t kBytes = size_t{1} << 30;
  const size_t words = kBytes / sizeof(uint64_t);
  std::vector<uint64_t> buffer(words, 1);  // written once: every page is backed
  const int n_threads = usable_cores();
  double best = 0.0;
  volatile uint64_t sink = 0;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<uint64_t> sums(static_cast<size_t>(n_threads), 0);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < n_threads; ++t) {
      threads.emplace_back([&, t] {
        const size_t lo = words * static_cast<size_t>(t) / static_cast<size_t>(n_threads);
        const size_t hi = words * static_cast<size_t>(t + 1) / static_cast<size_t>(n_threads);
        sums[static_cast<size_t>(t)] = sum_words(buffer.data() + lo, buffer.data() + hi);
      });
    }
    for (auto& th : threads) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (uint64_t v : sums) sink = sink + v;
    if (s > 0.0) best = std::max(best, static_cast<double>(kBytes) / s / 1e9);
  }
  (void)sink;
  return best;
}

MachineInfo describe_machine(bool measure_bandwidth) {
  MachineInfo m;
  m.cpu_model = cpu_model_from_cpuinfo(read_text("/proc/cpuinfo"));
  m.cpu_flags = our_cpu_flags();
  m.cpu_isa = std::string(cpu_isa_name(cpu_isa()));
  m.cores = usable_cores();
  m.mem_total_bytes = mem_total_bytes();
  m.gpus = nvidia_gpus();
  m.os = uname_text();
  m.load_average = load_average();
  if (measure_bandwidth) m.read_gb_s = measure_read_bandwidth_gb_s();
  return m;
}

nlohmann::json machine_json(const MachineInfo& m) {
  return {{"cpu_model", m.cpu_model},
          {"cpu_flags", m.cpu_flags},
          {"cpu_isa", m.cpu_isa},
          {"cores", m.cores},
          {"mem_total_bytes", m.mem_total_bytes},
          {"gpus", m.gpus},
          {"read_gb_s", m.read_gb_s ? nlohmann::json(*m.read_gb_s) : nlohmann::json(nullptr)},
          {"os", m.os},
          {"load_average", m.load_average}};
}

std::string machine_summary(const MachineInfo& m) {
  std::string flags;
  for (const auto& f : m.cpu_flags) flags += (flags.empty() ? "" : " ") + f;
  char mem[64];
  std::snprintf(mem, sizeof(mem), "%.1f GiB RAM", static_cast<double>(m.mem_total_bytes) / (1024.0 * 1024.0 * 1024.0));
  std::string s = m.cpu_model + " (" + flags + "; kernels " + m.cpu_isa + "), " + std::to_string(m.cores) + " cores, " + mem;
  if (m.read_gb_s) {
    char bw[64];
    std::snprintf(bw, sizeof(bw), ", read %.1f GB/s", *m.read_gb_s);
    s += bw;
  }
  if (m.gpus.empty()) {
    s += ", no NVIDIA GPU";
  } else {
    for (const auto& g : m.gpus) s += ", GPU " + g;
  }
  s += ", " + m.os + ", load average " + m.load_average;
  return s;
}

}  // namespace onebit
