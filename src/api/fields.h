// Every request field of the completion endpoints that OpenAI or llama-server defines, with what
// we do with it: implemented, accepted only at its neutral value (the feature is not built: any
// other value is a 400 naming it), or refused. A field in no list is a 400 too. The rule of
// issue 15: nothing a client sends is accepted and ignored. docs/api.md carries the same table
// (a test compares them).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/request.h"

namespace onebit {

enum class FieldStatus {
  kImplemented,  // used as documented
  kNeutralOnly,  // accepted at the values in `neutral` (which change nothing); others refused
  kRefused,      // refused whenever present and not null
};

enum FieldEndpoints : unsigned { kChatOnly = 1, kCompletionOnly = 2, kBothEndpoints = 3 };

struct FieldInfo {
  const char* name;
  unsigned endpoints;  // FieldEndpoints
  FieldStatus status;
  // kNeutralOnly: the accepted JSON values separated by '|' ("0|1"), or "*" for any value (the
  // field only tunes a feature that is off unless another field turns it on).
  const char* neutral;
  const char* why;     // for kNeutralOnly / kRefused: what is missing (the error says it)
};

// The whole table, in docs/api.md's order.
const std::vector<FieldInfo>& request_fields();

// Checks every key of `body` against the table for `endpoint`: an unknown field, a refused one,
// or a neutral-only one at another value is a 400 that names the field, the value and what is
// allowed. Null counts as absent.
ApiResult<bool> check_request_fields(const nlohmann::ordered_json& body, Endpoint endpoint);

}  // namespace onebit
