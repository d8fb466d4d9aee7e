#include "kernels/core/kernel_family.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tileplan::kernels {

absl::StatusOr<int64_t> Tactic::Param(absl::string_view name) const {
  auto it = params.find(std::string(name));
  if (it == params.end()) {
    return absl::NotFoundError(absl::StrCat(family, " tactic has no parameter '", name, "'"));
  }
  return it->second;
}

std::string Tactic::ParamsString() const {
  if (params.empty()) return "-";
  return absl::StrJoin(params, ",", absl::PairFormatter("="));
}

proto::Tactic TacticToProto(const Tactic& tactic) {
  proto::Tactic m;
  m.set_family(tactic.family);
  m.set_family_version(tactic.family_version);
  for (const auto& [name, value] : tactic.params) {
    proto::TacticParam* p = m.add_params();
    p->set_name(name);
    p->set_value(value);
  }
  return m;
}

absl::StatusOr<Tactic> TacticFromProto(const proto::Tactic& message) {
  if (message.family().empty()) return absl::InvalidArgumentError("tactic: family is empty");
  Tactic t;
  t.family = message.family();
  t.family_version = message.family_version();
  for (int i = 0; i < message.params_size(); ++i) {
    const proto::TacticParam& p = message.params(i);
    if (p.name().empty() || !t.params.emplace(p.name(), p.value()).second) {
      return absl::InvalidArgumentError(absl::StrCat("tactic of family ", t.family, ": params[", i,
                                                     "] has an empty or duplicate name '", p.name(),
                                                     "'"));
    }
  }
  return t;
}

absl::string_view ArchRowFor(int sm) {
  const int major = sm / 10;
  int best = -1;
  size_t best_row = kArchRows.size() - 1;
  for (size_t i = 0; i + 1 < kArchRows.size(); ++i) {
    int row_sm = 0;
    for (char c : kArchRows[i].substr(3)) row_sm = row_sm * 10 + (c - '0');
    if (row_sm / 10 == major && row_sm <= sm && row_sm > best) {
      best = row_sm;
      best_row = i;
    }
  }
  return kArchRows[best_row];
}

absl::Status KernelRegistry::Register(std::unique_ptr<KernelFamily> family) {
  const std::string name(family->name());
  if (family->kinds().empty() || family->version() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel family '", name, "' needs at least one kind and a version >= 1"));
  }
  if ((family->templates() != nullptr) != (family->launch_kind() == LaunchKind::kTemplates)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel family '", name, "': a launch half of templates exactly when it launches them"));
  }
  if (families_.count(name)) {
    return absl::AlreadyExistsError(absl::StrCat("kernel family '", name, "' is registered twice"));
  }
  const KernelFamily* f = family.get();
  families_.emplace(name, std::move(family));
  for (const std::string& kind : f->kinds()) {
    std::vector<const KernelFamily*>& list = by_kind_[kind];
    list.push_back(f);
    std::sort(list.begin(), list.end(),
              [](const KernelFamily* a, const KernelFamily* b) { return a->name() < b->name(); });
  }
  return absl::OkStatus();
}

const KernelFamily* KernelRegistry::Find(absl::string_view name) const {
  auto it = families_.find(name);
  return it == families_.end() ? nullptr : it->second.get();
}

std::vector<const KernelFamily*> KernelRegistry::FamiliesFor(absl::string_view kind) const {
  auto it = by_kind_.find(kind);
  return it == by_kind_.end() ? std::vector<const KernelFamily*>{} : it->second;
}

std::vector<const KernelFamily*> KernelRegistry::families() const {
  std::vector<const KernelFamily*> out;
  for (const auto& [name, f] : families_) out.push_back(f.get());
  return out;
}

}  // namespace tileplan::kernels
