// Status and Result: recoverable failures a user can cause (bad input, infeasible budget, I/O
// error) travel as values; internal invariants use FERRY_CHECK, which aborts with a message.
//
// Exit codes of the `ferry` command follow the status code: kInvalidArgument -> 2 (bad usage or
// input), everything else that is not ok -> 1 (runtime failure). See exit_code().
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace ferry {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the user's input is wrong: flags, model names, files, sizes
  kOutOfMemory,      // a device/host budget cannot hold what is asked of it
  kIoError,          // a file or device failed
  kUnsupported,      // valid request the backend cannot serve
  kInternal,         // a bug in Ferry
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status OutOfMemory(std::string msg) { return {StatusCode::kOutOfMemory, std::move(msg)}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status Unsupported(std::string msg) { return {StatusCode::kUnsupported, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Process exit code for this status: 0 ok, 2 bad input, 1 anything else.
  int exit_code() const {
    if (ok()) return 0;
    return code_ == StatusCode::kInvalidArgument ? 2 : 1;
  }
  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Result<T>: a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {   // NOLINT(implicit)
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result built from an ok Status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

// An exception carrying a Status, used inside a module (e.g. deep in a recursive builder) and
// converted back to a Status at the module boundary. Never let it escape a public function.
struct StatusError {
  Status status;
};

[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "ferry: internal error at %s:%d: check `%s` failed%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

}  // namespace ferry

// Internal invariant: aborts with file, line and an optional fmt-formatted message.
#define FERRY_CHECK(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) ::ferry::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)

// Propagate a non-ok Status from an expression returning Status.
#define FERRY_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::ferry::Status _st = (expr);            \
    if (!_st.ok()) return _st;               \
  } while (0)

#define FERRY_CONCAT_INNER(a, b) a##b
#define FERRY_CONCAT(a, b) FERRY_CONCAT_INNER(a, b)
// FERRY_ASSIGN_OR_RETURN(auto x, f()): unwrap a Result or return its Status.
#define FERRY_ASSIGN_OR_RETURN(lhs, expr) FERRY_ASSIGN_OR_RETURN_IMPL(FERRY_CONCAT(_res_, __LINE__), lhs, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
