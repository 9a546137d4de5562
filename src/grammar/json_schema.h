// JSON Schema -> GBNF (grammar.h), for `response_format` and tool parameters. Every keyword
// either constrains the grammar, is an annotation that constrains nothing (title, description,
// default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly), or is refused with
// an error naming it and its place: nothing is ignored. Where the schema allows more than the
// grammar generates (optional properties kept in schema order, additionalProperties beside known
// properties, unbounded numbers' digits), the grammar generates a subset: every output validates.
// The supported keywords, per type, are listed in docs/structured.md.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace onebit::grammar {

// The GBNF of the JSON texts `schema` accepts (a subset, see above); root rule "root". Errors
// name the JSON pointer of the offending place ("/properties/age") and the keyword.
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// The GBNF of any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf();

// The GBNF rule bodies a caller may embed (tool calls): a JSON value of `schema` as rule
// `<prefix>root` and the rules it needs, every name prefixed. `ws` is the whitespace rule used.
Result<std::string> json_schema_rules(const nlohmann::ordered_json& schema, const std::string& prefix);

// A GBNF literal ("...", escaped) matching exactly `bytes`.
std::string gbnf_literal(const std::string& bytes);

}  // namespace onebit::grammar
