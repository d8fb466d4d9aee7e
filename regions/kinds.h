// Region kinds: the registry that gives each kind its signature and its typing rule.
//
// A KindSpec states a kind's operands (role names; trailing ones may be optional, like
// linear's bias), its attribute schema (every key with its type, required or optional; a
// key outside the schema is an error) and an inference function that, from the operand
// types and attributes, derives the result types and the aliasing each result must
// declare. The verifier compares a region's declared results against that inference, so
// adding a kind is one more KindSpec entry with its inference function: there is no other
// place that knows kinds.
//
// Registration is explicit (RegisterAllKinds); the process-wide registry behind FindKind()
// is built by it on first use, never by a static initializer.
#ifndef TILEPLAN_REGIONS_KINDS_H_
#define TILEPLAN_REGIONS_KINDS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "regions/ir.h"

namespace tileplan::ir {

// The type of an attribute value; mirrors the alternatives of AttrValue.
enum class AttrType : uint8_t { kInt, kFloat, kBool, kString, kInts, kFloats };
// "int", "float", "bool", "string", "ints", "floats".
absl::string_view AttrTypeName(AttrType type);
AttrType AttrTypeOf(const AttrValue& value);

struct AttrSpec {
  std::string key;
  AttrType type = AttrType::kInt;
  // An optional key may be absent; whether it is allowed in a given combination of other
  // attributes (rope's llama3 keys) is decided by the kind's inference function.
  bool required = true;
};

// One result as the kind's rule requires it: its type and the aliasing it must declare.
struct InferredResult {
  TensorType type;
  ResultAlias alias;
};

// What an inference function sees of one region.
struct KindArgs {
  const std::vector<TensorType>& operands;
  // How messages name each operand (e.g. "%w"); parallel to `operands` or empty.
  const std::vector<std::string>& operand_names;
  const Attributes& attrs;
  // The result types the region declares. Only kinds whose result type is not a function
  // of the operands (reshape) read them.
  const std::vector<TensorType>& declared_results;

  // "operand 1 (%w)", or "operand 1" when no names were given.
  std::string OperandLabel(int index) const;
  // InvalidArgument: "operand 1 (%w) has type bf16[64,32], expected <expected>".
  absl::Status OperandError(int index, absl::string_view expected) const;
};

// Returns the results of a region of this kind, or InvalidArgument naming the offending
// operand or attribute. Called only after the operand count and the attribute schema
// were checked (see InferResults), so it may index operands up to the count it declared
// and read required attributes with their declared types.
using InferFn = std::function<absl::StatusOr<std::vector<InferredResult>>(const KindArgs&)>;

struct KindSpec {
  std::string name;
  std::vector<std::string> operands = {};  // role names in order, e.g. {"x", "w", "bias"}
  int optional_operands = 0;               // how many trailing roles may be omitted
  std::vector<AttrSpec> attrs = {};
  InferFn infer;
  // A fused kind (docs/ir.md, "Fused kinds"): formed by planner passes, never emitted by
  // lowering, and not allowed in a region's fused_from list.
  bool fused = false;

  int max_operands() const { return static_cast<int>(operands.size()); }
  int min_operands() const { return max_operands() - optional_operands; }
  const AttrSpec* FindAttr(absl::string_view key) const;  // nullptr when not in the schema
  // "x, w[, bias]"
  std::string OperandSignature() const;
};

// OK when every required key is present, every key is in the schema and every value has
// its declared type (an int is not a float); otherwise InvalidArgument naming the key.
absl::Status CheckAttributes(const KindSpec& spec, const Attributes& attrs);

// Checks the operand count and the attribute schema, then runs the kind's inference.
absl::StatusOr<std::vector<InferredResult>> InferResults(const KindSpec& spec,
                                                         const KindArgs& args);

class KindRegistry {
 public:
  // AlreadyExists for a name registered before; InvalidArgument for a malformed spec
  // (name not an identifier, no inference function, duplicate attribute keys, more
  // optional operands than operands).
  absl::Status Register(KindSpec spec);
  const KindSpec* Find(absl::string_view name) const;  // nullptr when unknown
  std::vector<std::string> Names() const;              // sorted
  // Sorted names of the primitive (not fused) kinds.
  std::vector<std::string> PrimitiveNames() const;

 private:
  std::map<std::string, KindSpec, std::less<>> kinds_;
};

// The primitive kinds of docs/ir.md (emitted by model lowering).
absl::Status RegisterPrimitiveKinds(KindRegistry& registry);
// The fused kinds of docs/ir.md (formed by planner passes); each has `fused` set.
absl::Status RegisterFusedKinds(KindRegistry& registry);
// Every kind tileplan knows.
absl::Status RegisterAllKinds(KindRegistry& registry);

// The process-wide registry, filled by RegisterAllKinds on first use (thread-safe).
const KindRegistry& GlobalKindRegistry();
const KindSpec* FindKind(absl::string_view name);
std::vector<std::string> KindNames();           // sorted
std::vector<std::string> PrimitiveKindNames();  // sorted

}  // namespace tileplan::ir

#endif  // TILEPLAN_REGIONS_KINDS_H_
