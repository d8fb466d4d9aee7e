// Status propagation helpers shared by every layer.
//
// Abseil 20220623 ships no status macros, so the project defines its two here, once.
#ifndef TILEPLAN_BASE_STATUS_MACROS_H_
#define TILEPLAN_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TP_STATUS_CONCAT_INNER_(a, b) a##b
#define TP_STATUS_CONCAT_(a, b) TP_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if not OK.
#define TP_RETURN_IF_ERROR(expr)                                  \
  do {                                                            \
    ::absl::Status tp_status_ = (expr);                           \
    if (!tp_status_.ok()) return tp_status_;                      \
  } while (false)

// `TP_ASSIGN_OR_RETURN(auto x, Foo());` evaluates Foo() (an absl::StatusOr<T>); on error
// returns its status, otherwise move-assigns the value to the left-hand side.
#define TP_ASSIGN_OR_RETURN(lhs, expr) \
  TP_ASSIGN_OR_RETURN_IMPL_(TP_STATUS_CONCAT_(tp_statusor_, __LINE__), lhs, expr)

#define TP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

#endif  // TILEPLAN_BASE_STATUS_MACROS_H_
