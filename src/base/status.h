// Result<T> and Error: how outside input (files, requests, options) reports failure.
// Depends on nothing but the standard library.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace onebit {

// A failure meant for a person: names the item, the value, the allowed range and the fix.
struct Error {
  std::string message;
};

// Either a T or an Error. Cheap to move; never throws on access misuse (CHECKs instead).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}           // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}       // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const { return std::get<1>(v_); }
  const std::string& message() const { return error().message; }

 private:
  std::variant<T, Error> v_;
};

// Result of an operation with no value.
struct Ok {};
using Status = Result<Ok>;
inline Status ok_status() { return Ok{}; }

// Builds an Error from a message; the message should already say what and how to fix.
inline Error make_error(std::string message) { return Error{std::move(message)}; }

// Prefixes an error with the stage it happened in ("gguf: ", "vocab: ").
inline Error with_context(const std::string& stage, const Error& e) {
  return Error{stage + ": " + e.message};
}

}  // namespace onebit

// Propagates an Error out of a function returning Result<...>.
#define ONEBIT_TRY(expr)                                          \
  do {                                                            \
    auto&& onebit_try_r_ = (expr);                                \
    if (!onebit_try_r_.ok()) return onebit_try_r_.error();        \
  } while (0)

// Assigns the value of a Result to `lhs`, or propagates its Error.
#define ONEBIT_ASSIGN_OR_RETURN(lhs, expr)                        \
  ONEBIT_ASSIGN_OR_RETURN_IMPL_(ONEBIT_CONCAT_(onebit_r_, __LINE__), lhs, expr)
#define ONEBIT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)             \
  auto tmp = (expr);                                              \
  if (!tmp.ok()) return tmp.error();                              \
  lhs = std::move(tmp).value()
#define ONEBIT_CONCAT_(a, b) ONEBIT_CONCAT2_(a, b)
#define ONEBIT_CONCAT2_(a, b) a##b
