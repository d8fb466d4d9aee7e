// The persistent kernel's instance (kernels/launch/kernel_loader.h, PersistentKernelInstance)
// and its compilation by NVRTC for the runs the planner emits. No GPU needed.
#include <cstdio>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "kernels/core/template_launch.h"
#include "kernels/families/registry.h"
#include "kernels/launch/kernel_loader.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "models/config.h"
#include "planner/plan_builder.h"
#include "regions/serialization.h"
#include "tests/kernels/kernels_testing.h"

namespace tileplan::kernels {
namespace {

TEST(PersistentKernelInstanceTest, OneTaskTypePerKernelInStageOrder) {
  const KernelInstance gemv{"gemv_split_k.cuh", {"tileplan::gemv_split_k<float, 1>"}, {}};
  const KernelInstance other_gemv{"gemv_split_k.cuh", {"tileplan::gemv_split_k<float, 2>"}, {}};
  const KernelInstance attention{
      "attention_decode_rope.cuh", {"tileplan::prepare", "tileplan::attention_decode_rope<3>"}, {}};
  const PersistentInstance p = PersistentKernelInstance(
      128, 2, 3, {{&gemv, 0}, {&attention, 1}, {&other_gemv, 0}, {&gemv, 0}, {&attention, 0}});
  EXPECT_EQ(p.instance.source, "persistent.cuh");
  EXPECT_EQ(p.instance.includes,
            (std::vector<std::string>{"gemv_split_k.cuh", "attention_decode_rope.cuh"}));
  EXPECT_EQ(p.stage_ops, (std::vector<int>{0, 1, 2, 0, 3}));
  ASSERT_EQ(p.instance.name_expressions.size(), 1u);
  EXPECT_EQ(p.instance.name_expressions[0],
            "tileplan::persistent_kernel<128, 2, 3, tileplan::gemv_split_k_task<float, 1>, "
            "tileplan::attention_decode_rope_task<3>, tileplan::gemv_split_k_task<float, 2>, "
            "tileplan::prepare_task>");
}

// The decode run of a dense model, as the runtime would build it, compiles for sm_90: every
// stage's kernel has a task, and the tasks compose in one kernel.
TEST(PersistentKernelCompileTest, DenseDecodeRunCompiles) {
  absl::StatusOr<models::ModelConfig> config = models::BundledModelConfig("qwen3-0.6b");
  ASSERT_TRUE(config.ok()) << config.status();
  planner::PlanOptions options;
  options.prefill_tokens = {};
  options.decode_batches = {2};
  options.max_context = 1024;
  options.decode_backend = planner::proto::PlanOptions::DECODE_BACKEND_PERSISTENT;
  const targets::TargetDescription target = testing::MustTarget("h200");
  absl::StatusOr<planner::proto::ExecutionPlan> plan =
      planner::BuildExecutionPlan(*config, target, options, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const planner::proto::Phase& phase = plan->phases(0);
  ASSERT_EQ(phase.persistent_size(), 1);
  absl::StatusOr<ir::Graph> graph = ir::GraphFromProto(phase.graph());
  ASSERT_TRUE(graph.ok()) << graph.status();
  ShapeBindings bindings;
  for (const auto& b : phase.bindings()) bindings[b.symbol()] = b.extent();
  absl::StatusOr<BoundGraph> bound = BoundGraph::Create(*graph, bindings, phase.context());
  ASSERT_TRUE(bound.ok()) << bound.status();

  std::vector<KernelInstance> instances;
  const planner::proto::PersistentRun& run = phase.persistent(0);
  instances.reserve(static_cast<size_t>(run.stages_size()));
  std::vector<std::pair<const KernelInstance*, int>> stages;
  for (const planner::proto::PersistentStage& stage : run.stages()) {
    const planner::proto::Step& step = phase.steps(stage.step());
    absl::StatusOr<Tactic> tactic = TacticFromProto(step.tactic());
    ASSERT_TRUE(tactic.ok()) << tactic.status();
    const KernelFamily* family = GlobalKernelRegistry().Find(tactic->family);
    ASSERT_NE(family, nullptr);
    absl::StatusOr<KernelInstance> instance =
        InstanceFor(*family, BoundRegion(*bound, step.region()), *tactic);
    ASSERT_TRUE(instance.ok()) << instance.status();
    instances.push_back(*std::move(instance));
    stages.emplace_back(&instances.back(), 0);
  }
  const PersistentInstance persistent =
      PersistentKernelInstance(run.threads(), run.blocks_per_sm(), run.stream_slots(), stages);
  // Identical layers share their task types: the QKV, attention, gate/up steps of a layer,
  // and one for the o-projection and down steps, which the weight stream gives the same tiles
  // (8 rows of the whole K, a residual epilogue).
  ASSERT_GT(run.stream_slots(), 0);
  EXPECT_EQ(std::set<int>(persistent.stage_ops.begin(), persistent.stage_ops.end()).size(), 4u);

  NvrtcCompiler::Options compiler_options;
  compiler_options.use_disk_cache = false;
  absl::StatusOr<std::unique_ptr<NvrtcCompiler>> compiler = NvrtcCompiler::Create(compiler_options);
  ASSERT_TRUE(compiler.ok()) << compiler.status();
  CompileRequest request;
  request.source = persistent.instance.source;
  request.includes = persistent.instance.includes;
  request.name_expressions = persistent.instance.name_expressions;
  request.sm = 90;
  absl::StatusOr<CompiledModule> module = (*compiler)->Compile(request);
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_FALSE(module->cubin.empty());
  ASSERT_EQ(module->lowered_names.size(), 1u);
  std::printf("%s\n", persistent.instance.name_expressions[0].c_str());
}

}  // namespace
}  // namespace tileplan::kernels
