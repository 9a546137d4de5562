// Prints the native engine's logits for every position of a token-id sequence, for
// tools/train/compare_logits.py (the F16 tolerance check of the exported target). Not part of
// the CMake build: compare_logits.py compiles it against a build directory's static libraries.
//   engine_logits MODEL.gguf IDS.txt OUT.f32   (IDS.txt: ids separated by spaces)
#include <cstdio>
#include <fstream>
#include <vector>

#include "backend/backend.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"

using namespace onebit;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: engine_logits MODEL.gguf IDS.txt OUT.f32\n");
    return 2;
  }
  std::vector<TokenId> ids;
  std::ifstream in(argv[2]);
  for (long v; in >> v;) ids.push_back(static_cast<TokenId>(v));
  auto file = GgufFile::open(argv[1]);
  if (!file.ok()) {
    std::fprintf(stderr, "engine_logits: %s\n", file.message().c_str());
    return 1;
  }
  auto backend = make_reference_backend();
  auto model = Model::load(*file, *backend);
  if (!model.ok()) {
    std::fprintf(stderr, "engine_logits: %s\n", model.message().c_str());
    return 1;
  }
  auto kv = (*model)->new_kv_cache(static_cast<int32_t>(ids.size()));
  std::vector<float> logits;  // [n_tokens, vocab]
  auto st = (*model)->forward(*kv, ids, /*all_logits=*/true, logits);
  if (!st.ok()) {
    std::fprintf(stderr, "engine_logits: %s\n", st.message().c_str());
    return 1;
  }
  std::FILE* out = std::fopen(argv[3], "wb");
  if (!out || std::fwrite(logits.data(), sizeof(float), logits.size(), out) != logits.size()) return 1;
  std::fclose(out);
  return 0;
}
