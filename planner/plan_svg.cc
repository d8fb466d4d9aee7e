#include "planner/plan_svg.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "planner/plan_text.h"

namespace tileplan::planner {
namespace {

// Panel geometry, in SVG user units.
constexpr double kWidth = 1180;
constexpr double kPanelLeft = 80, kPanelRight = 920;
constexpr double kRoofTop = 70, kRoofBottom = 470;     // the roofline panel
constexpr double kArenaTop = 560, kArenaBottom = 880;  // the arena panel
constexpr double kHeight = 940;

std::string Escape(absl::string_view text) {
  return absl::StrReplaceAll(text,
                             {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

// A fixed palette, assigned to region kinds in order of first appearance.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                                    "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173"};

// Log-scale axis: maps [lo, hi] (decades) onto [a, b].
struct LogAxis {
  double lo, hi, a, b;
  double operator()(double v) const {
    const double t = (std::log10(v) - lo) / (hi - lo);
    return a + t * (b - a);
  }
};

std::string Text(double x, double y, absl::string_view text, absl::string_view extra = "") {
  return absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\"%s>%s</text>\n", x, y, extra, Escape(text));
}

std::string Line(double x1, double y1, double x2, double y2, absl::string_view style) {
  return absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" %s/>\n", x1, y1, x2,
                         y2, style);
}

// "1e3" -> "1 K"-style labels for decades of flops per byte or TFLOP/s.
std::string Decade(int e) {
  if (e >= 0) return absl::StrCat("1", std::string(static_cast<size_t>(e), '0'));
  return absl::StrCat("0.", std::string(static_cast<size_t>(-e - 1), '0'), "1");
}

}  // namespace

int DefaultSvgPhase(const proto::ExecutionPlan& plan) {
  for (int i = 0; i < plan.phases_size(); ++i) {
    if (plan.phases(i).kind() == proto::Phase::KIND_DECODE) return i;
  }
  return 0;
}

absl::StatusOr<std::string> PlanSvg(const proto::ExecutionPlan& plan, int phase_index) {
  if (phase_index < 0 || phase_index >= plan.phases_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "phase ", phase_index, " does not exist (the plan has ", plan.phases_size(), " phases)"));
  }
  const proto::Phase& phase = plan.phases(phase_index);
  const targets::TargetDescription& t = plan.target();
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\">\n",
      kWidth, kHeight, kWidth, kHeight);
  absl::StrAppend(&out, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  absl::StrAppend(&out, Text(kPanelLeft, 24,
                             absl::StrCat("plan ", plan.model(), " on ", t.name(), " (", t.gpu(),
                                          "): ", phase.name()),
                             " font-size=\"15\" font-weight=\"bold\""));

  // Kind colors, in order of first appearance.
  std::map<std::string, std::string> color;
  std::vector<std::string> kinds;
  for (const proto::Step& s : phase.steps()) {
    if (color.emplace(s.kind(), kPalette[color.size() % std::size(kPalette)]).second) {
      kinds.push_back(s.kind());
    }
  }

  // Roofline: x = flops per byte, y = TFLOP/s at the step's time (measured when tuned).
  const double bw_tb = t.achievable_memory_bandwidth_gbps() / 1000;  // TB/s: TFLOP/s per flop/B
  const double tensor = t.achievable_bf16_tflops();
  const double fp32 = t.peak_fp32_tflops() * t.achievable_bf16_tflops() / t.peak_bf16_tflops();
  const LogAxis x{-2, 4, kPanelLeft, kPanelRight};  // 0.01 .. 10^4 flops/B
  const LogAxis y{-4, std::ceil(std::log10(std::max(tensor, 1.0))) + 0.3, kRoofBottom, kRoofTop};
  absl::StrAppend(&out, Text(kPanelLeft, kRoofTop - 22,
                             absl::StrFormat("each step on the roofline: achievable %.0f GB/s, "
                                             "%.0f TFLOP/s bf16 tensor cores, %.0f TFLOP/s fp32",
                                             t.achievable_memory_bandwidth_gbps(), tensor, fp32),
                             " font-size=\"12\""));
  absl::StrAppend(
      &out,
      absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                      "fill=\"none\" stroke=\"#999\"/>\n",
                      kPanelLeft, kRoofTop, kPanelRight - kPanelLeft, kRoofBottom - kRoofTop));
  for (int e = -2; e <= 4; ++e) {
    const double px = x(std::pow(10.0, e));
    absl::StrAppend(&out, Line(px, kRoofTop, px, kRoofBottom, "stroke=\"#eee\""),
                    Text(px - 8, kRoofBottom + 14, Decade(e)));
  }
  for (int e = -4; e <= static_cast<int>(std::floor(y.hi)); ++e) {
    const double py = y(std::pow(10.0, e));
    absl::StrAppend(&out, Line(kPanelLeft, py, kPanelRight, py, "stroke=\"#eee\""),
                    Text(kPanelLeft - 50, py + 4, Decade(e)));
  }
  absl::StrAppend(
      &out, Text((kPanelLeft + kPanelRight) / 2 - 60, kRoofBottom + 30, "flops per byte moved"),
      Text(12, (kRoofTop + kRoofBottom) / 2, "TFLOP/s",
           absl::StrFormat(" transform=\"rotate(-90 12 %.1f)\"", (kRoofTop + kRoofBottom) / 2)));
  // Ceilings: bandwidth × intensity up to each compute roof.
  for (const auto& [roof, label] :
       {std::pair<double, const char*>{tensor, "tensor cores"}, {fp32, "fp32 CUDA cores"}}) {
    const double knee = roof / bw_tb;
    const double x0 = std::pow(10.0, x.lo);
    const double x_end = std::pow(10.0, x.hi);
    absl::StrAppend(
        &out, Line(x(x0), y(std::max(bw_tb * x0, std::pow(10.0, y.lo))), x(std::min(knee, x_end)),
                   y(std::min(roof, bw_tb * x_end)), "stroke=\"#333\" stroke-width=\"1.5\""));
    if (knee < x_end) {
      absl::StrAppend(&out,
                      Line(x(knee), y(roof), x(x_end), y(roof),
                           "stroke=\"#333\" stroke-width=\"1.5\" stroke-dasharray=\"4 2\""),
                      Text(x(x_end) - 110, y(roof) - 5, label));
    }
  }
  int plotted = 0, unplotted = 0;
  for (int i = 0; i < phase.steps_size(); ++i) {
    const proto::Step& s = phase.steps(i);
    const bool tuned = s.source() == proto::Step::SOURCE_TUNED;
    const double us = tuned ? s.measured_us() : s.estimated_us();
    if (s.launches() == 0) continue;
    if (s.flops() <= 0 || s.bytes() <= 0 || us <= 0) {
      ++unplotted;
      continue;
    }
    const double intensity = std::clamp(static_cast<double>(s.flops()) / s.bytes(),
                                        std::pow(10.0, x.lo), std::pow(10.0, x.hi));
    const double tflops = std::clamp(static_cast<double>(s.flops()) / us / 1e6,
                                     std::pow(10.0, y.lo), std::pow(10.0, y.hi));
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" fill-opacity=\"%s\" "
            "stroke=\"%s\"><title>step %d %s (%s, %s): %s, %s flops, %.2f us %s</title></circle>\n",
            x(intensity), y(tflops), tuned ? color[s.kind()] : "white", tuned ? "0.9" : "1",
            color[s.kind()], i, Escape(s.name()), Escape(s.kind()), Escape(s.tactic().family()),
            HumanBytes(s.bytes()), absl::StrCat(s.flops()), us, tuned ? "measured" : "estimated"));
    ++plotted;
  }
  absl::StrAppend(&out, Text(kPanelLeft + 8, kRoofTop + 16,
                             absl::StrCat(plotted, " steps: filled measured, hollow estimated",
                                          unplotted > 0 ? absl::StrCat("; ", unplotted,
                                                                       " that move bytes only "
                                                                       "not shown")
                                                        : "")));
  // Legend of kinds, right of the roofline.
  for (size_t k = 0; k < kinds.size(); ++k) {
    const double ly = kRoofTop + 10 + 14 * static_cast<double>(k);
    absl::StrAppend(&out,
                    absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\" "
                                    "fill=\"%s\"/>\n",
                                    kPanelRight + 14, ly - 8, color[kinds[k]]),
                    Text(kPanelRight + 28, ly, kinds[k]));
  }

  // Arena: x = step, y = offset; one rectangle per buffer over its live steps.
  const proto::Arena& a = phase.arena();
  const double steps = std::max(1, phase.steps_size());
  const double bytes = static_cast<double>(std::max<int64_t>(1, a.arena_bytes()));
  absl::StrAppend(
      &out, Text(kPanelLeft, kArenaTop - 22,
                 absl::StrCat("arena ", HumanBytes(a.arena_bytes()), " over ", phase.steps_size(),
                              " steps: each buffer from its "
                              "first to its last step"),
                 " font-size=\"12\""));
  absl::StrAppend(
      &out,
      absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                      "fill=\"none\" stroke=\"#999\"/>\n",
                      kPanelLeft, kArenaTop, kPanelRight - kPanelLeft, kArenaBottom - kArenaTop),
      Text(kPanelLeft, kArenaBottom + 14, "step 0"),
      Text(kPanelRight - 50, kArenaBottom + 14, absl::StrCat("step ", phase.steps_size())),
      Text(kPanelLeft - 70, kArenaTop + 4, "offset 0"),
      Text(kPanelLeft - 70, kArenaBottom, HumanBytes(a.arena_bytes())));
  for (const proto::ArenaBuffer& b : a.buffers()) {
    const double x0 = kPanelLeft + (kPanelRight - kPanelLeft) * b.first_step() / steps;
    const double x1 = kPanelLeft + (kPanelRight - kPanelLeft) * (b.last_step() + 1) / steps;
    const double y0 = kArenaTop + (kArenaBottom - kArenaTop) * b.offset() / bytes;
    const double h = std::max(0.5, (kArenaBottom - kArenaTop) * b.bytes() / bytes);
    std::string holds, fill;
    if (b.workspace_of() >= 0) {
      holds = absl::StrCat("workspace of step ", b.workspace_of());
      fill = "#ffbb78";
    } else if (b.counters_of() >= 0) {
      holds = absl::StrCat("counters of step ", b.counters_of());
      fill = "#c7c7c7";
    } else {
      holds = absl::StrJoin(b.values(), ", ");
      fill = b.input() ? "#98df8a" : "#aec7e8";
    }
    absl::StrAppend(
        &out, absl::StrFormat("<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                              "fill=\"%s\" stroke=\"#555\" stroke-width=\"0.3\"><title>%s: %s at "
                              "%d, steps %d-%d</title></rect>\n",
                              x0, y0, std::max(0.5, x1 - x0), h, fill, Escape(holds),
                              HumanBytes(b.bytes()), b.offset(), b.first_step(), b.last_step()));
  }
  absl::StrAppend(&out, Text(kPanelLeft, kArenaBottom + 32,
                             "blue: values, green: graph inputs, orange: a step's workspace, "
                             "grey: completion counters"));
  absl::StrAppend(&out, "</svg>\n");
  return out;
}

}  // namespace tileplan::planner
