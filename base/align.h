// Rounding of sizes and offsets.
#ifndef TILEPLAN_BASE_ALIGN_H_
#define TILEPLAN_BASE_ALIGN_H_

#include <cstdint>

namespace tileplan {

// The smallest multiple of `alignment` (> 0) at or above `value` (>= 0).
constexpr int64_t AlignUp(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace tileplan

#endif  // TILEPLAN_BASE_ALIGN_H_
