// ChatTemplate: the boundary where interpreter exceptions become Results.
#include "template/template.h"

#include "template/lexer.h"
#include "template/parser.h"

namespace onebit {

Result<ChatTemplate> ChatTemplate::parse(const std::string& source) {
  ONEBIT_ASSIGN_OR_RETURN(auto tokens, tmpl::tokenize(source));
  ONEBIT_ASSIGN_OR_RETURN(auto body, tmpl::parse(tokens));
  ChatTemplate t;
  t.body_ = std::make_shared<const tmpl::Body>(std::move(body));
  return t;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  if (!context.is_object() && !context.is_null()) {
    return make_error("template context must be a JSON object, got " + std::string(context.type_name()));
  }
  try {
    auto root = std::make_shared<tmpl::Scope>();
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) root->vars[it.key()] = tmpl::Value::from_json(it.value());
    }
    tmpl::Interpreter in(options, root);
    in.render(*body_);
    return in.output();
  } catch (const tmpl::RenderError& e) {
    if (e.raised_by_template) return make_error(e.what());
    std::string what = e.what();
    return make_error((what.rfind("line ", 0) == 0 ? "template render error at " : "template render error: ") + what);
  } catch (const std::bad_alloc&) {
    return make_error("template render error: out of memory");
  }
}

Result<std::string> ChatTemplate::render_chat(const ChatInputs& inputs, const RenderOptions& options) const {
  if (!inputs.kwargs.is_null() && !inputs.kwargs.is_object()) {
    return make_error("chat template kwargs must be a JSON object, got " + std::string(inputs.kwargs.type_name()));
  }
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = inputs.messages;
  ctx["tools"] = inputs.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = inputs.add_generation_prompt;
  if (inputs.kwargs.is_object()) {
    for (auto it = inputs.kwargs.begin(); it != inputs.kwargs.end(); ++it) ctx[it.key()] = it.value();
  }
  return render(ctx, options);
}

}  // namespace onebit
