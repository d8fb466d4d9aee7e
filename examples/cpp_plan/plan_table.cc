// Plans a model through tileplan's C API from C++ and prints the plan's table (--show-plan's):
// each handle owned by a std::unique_ptr with the API's own free function, errors turned into
// exceptions at the boundary of this program.
//
//   plan_table MODEL [TARGET]
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "tileplan/tileplan.h"

namespace {

struct StatusFree {
  void operator()(tileplan_status* s) const { tileplan_status_free(s); }
};
struct PlanFree {
  void operator()(tileplan_plan* p) const { tileplan_plan_free(p); }
};
struct MemoryFree {
  void operator()(char* p) const { tileplan_free(p); }
};
using Plan = std::unique_ptr<tileplan_plan, PlanFree>;

// Throws with the status's code and message when a call failed.
void Check(tileplan_status* raw) {
  std::unique_ptr<tileplan_status, StatusFree> status(raw);
  if (status) {
    throw std::runtime_error("tileplan error " + std::to_string(tileplan_status_code(raw)) + ": " +
                             tileplan_status_message(raw));
  }
}

Plan MakePlan(const std::string& model, const char* target) {
  tileplan_plan_options options;
  tileplan_plan_options_init(&options);
  options.model = model.c_str();
  options.target = target;
  tileplan_plan* plan = nullptr;
  Check(tileplan_plan_create(&options, &plan));
  return Plan(plan);
}

std::string Table(const tileplan_plan& plan) {
  char* data = nullptr;
  size_t size = 0;
  Check(tileplan_plan_serialize(&plan, TILEPLAN_PLAN_TABLE, &data, &size));
  std::unique_ptr<char, MemoryFree> owned(data);
  return std::string(data, size);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: plan_table MODEL [TARGET]\n");
    return 2;
  }
  try {
    const Plan plan = MakePlan(argv[1], argc > 2 ? argv[2] : nullptr);
    std::fputs(Table(*plan).c_str(), stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plan_table: %s\n", e.what());
    return 1;
  }
  return 0;
}
