// The draft-model drafter (`--draft MODEL.gguf`): a small model with the target's vocabulary
// drafts greedily, one token per forward, with K/V of its own in a pool that mirrors the target's
// (drafter.h). The MTP head and DFlash drafters are in head_drafters.h.
#pragma once

#include <memory>

#include "engine/drafter.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"

namespace onebit {

// A drafter over `draft` (loaded from `draft_file`) for `target` (loaded from `target_file`); the
// files must outlive it. Refused when the vocabularies differ (size, or any token's text).
// p_min: a draft stops before the first token whose probability under the draft model is below it
// (0: never).
Result<std::shared_ptr<Drafter>> make_draft_model_drafter(const GgufFile& target_file, const Model& target,
                                                          const GgufFile& draft_file, std::unique_ptr<Model> draft,
                                                          float p_min);

// Greedy pick from a row of logits: the argmax and its softmax probability, which costs an exp per
// vocabulary entry and is computed only when a draft can stop on it (p_min > 0; else p = 1).
struct TopToken {
  TokenId id = -1;
  float p = 0.0f;
};
TopToken top_token(std::span<const float> logits, float p_min);

}  // namespace onebit
