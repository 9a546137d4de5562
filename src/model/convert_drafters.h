// Drafter checkpoints written by tools/train/export.py (an MTP head, a DFlash block drafter:
// config.json + model.safetensors) -> GGUF, in the layout docs/models.md defines. The drafters
// share the target's token embedding and output matrix, so their files hold neither.
#pragma once

#include <string>

#include "base/status.h"
#include "model/convert_hf.h"

namespace onebit {

// True when `hf_dir`/config.json has model_type "qwen3_mtp" or "qwen3_dflash". Never fails: an
// unreadable config is "not a drafter" (convert_hf then reports it).
bool is_drafter_checkpoint(const std::string& hf_dir);

// Converts a drafter checkpoint (out_type f32, f16, bf16 or q8_0 for matrices; vectors stay f32).
// Errors name the file, the config field or tensor and the value; nothing is written on error.
Result<ConvertReport> convert_drafter(const ConvertOptions& options);

}  // namespace onebit
