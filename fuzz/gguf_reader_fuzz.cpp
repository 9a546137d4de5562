// libFuzzer target for the GGUF reader: any bytes must give a GgufFile or an error, never a crash.
// On success it reads every value and tensor byte, and checks that the writer accepts what the
// reader accepted and that write -> read -> write is stable (same bytes twice).
#include <cstddef>
#include <cstdint>
#include <span>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace {

volatile uint64_t g_sink = 0;

void touch(const onebit::GgufValue& v) {
  using onebit::GgufValueType;
  switch (v.type) {
    case GgufValueType::kString:
      for (char c : v.str) g_sink = g_sink + static_cast<uint8_t>(c);
      return;
    case GgufValueType::kBool:
      g_sink = g_sink + v.as_bool();
      return;
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
      g_sink = g_sink + static_cast<uint64_t>(v.as_float() != 0.0);
      return;
    case GgufValueType::kArray:
      if (v.array_type == GgufValueType::kString) {
        for (auto s : v.strings) g_sink = g_sink + s.size() + (s.empty() ? 0 : static_cast<uint8_t>(s.back()));
      } else if (v.array_type == GgufValueType::kArray) {
        for (const auto& e : v.array_nested) touch(e);
      } else if (v.array_type == GgufValueType::kFloat32 || v.array_type == GgufValueType::kFloat64) {
        for (uint64_t i = 0; i < v.array_count; ++i) g_sink = g_sink + (v.array_float(i) != 0.0);
      } else {
        for (uint64_t i = 0; i < v.array_count; ++i) g_sink = g_sink + static_cast<uint64_t>(v.array_int(i));
      }
      return;
    default:
      g_sink = g_sink + v.as_uint() + static_cast<uint64_t>(v.as_int());
  }
}

void use_getters(const onebit::GgufFile& f, std::string_view key) {
  g_sink = g_sink + f.get_string(key).ok() + f.get_int(key).ok() + f.get_uint(key).ok() + f.get_float(key).ok() +
           f.get_bool(key).ok() + f.get_string_array(key).ok() + f.get_int_array(key).ok() +
           f.get_float_array(key).ok();
}

std::vector<uint8_t> write(const onebit::GgufFile& f) {
  onebit::GgufWriter w;
  w.copy_metadata(f);
  for (const auto& t : f.tensors())
    if (!w.add_tensor(t).ok()) __builtin_trap();  // the writer refused a tensor the reader accepted
  auto out = w.write_to_memory();
  if (!out.ok()) __builtin_trap();
  return std::move(out).value();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = onebit::GgufFile::from_memory(std::span<const uint8_t>(data, size), "fuzz");
  if (!f.ok()) {
    if (f.message().empty()) __builtin_trap();  // every error must say something
    return 0;
  }
  for (const auto& kv : f->metadata()) {
    touch(kv.value);
    use_getters(*f, kv.key);
    if (f->find(kv.key) != &kv.value) __builtin_trap();  // keys are unique
  }
  for (const auto& t : f->tensors()) {
    for (uint64_t i = 0; i < t.n_bytes; ++i) g_sink = g_sink + t.data[i];
    if (f->find_tensor(t.name) != &t) __builtin_trap();  // names are unique
  }
  const auto once = write(*f);
  auto again = onebit::GgufFile::from_memory(once, "rewritten");
  if (!again.ok()) __builtin_trap();  // the writer produced a file the reader refuses
  if (write(*again) != once) __builtin_trap();
  return 0;
}
