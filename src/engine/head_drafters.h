// Model drafters over the target's hidden states (drafter.h): the MTP head (`qwen3_mtp`, drafts by
// chaining one entry per token) and the DFlash block drafter (`qwen3_dflash`, one block forward per
// step). Both keep K/V in a pool mirroring the target's and run on the target's backend.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/drafter.h"
#include "gguf/gguf_reader.h"
#include "model/model.h"

namespace onebit {

// The MTP head of `file` (which must outlive the drafter) for `target`: a qwen3_mtp head file, or
// the target's own file when it carries MTP layers (<arch>.nextn_predict_layers). A draft stops at
// the first token whose head probability is below p_min (0: never). Errors name the mismatch
// (architecture, vocabulary, geometry, tensors); a target-architecture file without MTP layers is
// refused: pass a head file.
Result<std::shared_ptr<Drafter>> make_mtp_drafter(const GgufFile& file, Model& target, float p_min);

// The DFlash drafter of `file` (a qwen3_dflash GGUF) for `target`; p_min as above.
Result<std::shared_ptr<Drafter>> make_dflash_drafter(const GgufFile& file, Model& target, float p_min);

// qwen3_dflash.block_size of `file` (0 when absent): a step drafts block_size - 1 tokens at most.
int32_t dflash_block_size(const GgufFile& file);

}  // namespace onebit
