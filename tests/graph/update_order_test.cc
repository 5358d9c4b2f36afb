// interleave_updates: every update right after the latest op it depends on, every dependence
// kept, nothing else reordered (graph/update_order.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "graph/update_order.h"
#include "graph/zoo/zoo.h"

namespace ferry {
namespace {

Graph model(const std::string& name, OptimizerKind opt, Precision p = Precision::kFp32) {
  ModelConfig c;
  c.batch = 2;
  c.train.optimizer = opt;
  c.precision = p;
  if (name.rfind("gpt2", 0) == 0 || name.rfind("bert", 0) == 0) c.seq = 16;
  return build_model(name, c).value();
}

// Whether a and b touch a tensor one of them writes (the order between them matters).
bool conflict(const Op& a, const Op& b) {
  auto touches = [](const Op& op, TensorId t) {
    return std::find(op.inputs.begin(), op.inputs.end(), t) != op.inputs.end() || op.writes(t);
  };
  for (TensorId t : a.outputs)
    if (touches(b, t)) return true;
  for (TensorId t : b.outputs)
    if (touches(a, t)) return true;
  return false;
}

class Interleave : public ::testing::TestWithParam<std::tuple<const char*, OptimizerKind, Precision>> {};

TEST_P(Interleave, KeepsEveryDependenceAndMovesEachUpdateAsEarlyAsItCan) {
  const auto [name, opt, precision] = GetParam();
  const Graph g = model(name, opt, precision);
  ASSERT_EQ(update_order_of(g), UpdateOrder::kEnd);
  Result<Graph> r = interleave_updates(g);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Graph& h = *r;
  ASSERT_EQ(h.ops.size(), g.ops.size());
  EXPECT_TRUE(h.validate().ok());
  EXPECT_EQ(update_order_of(h), UpdateOrder::kInterleaved);
  // The same ops (by name and operands, each once); where each went.
  using Key = std::tuple<std::string, std::vector<TensorId>, std::vector<TensorId>>;
  std::map<Key, size_t> where;
  for (size_t k = 0; k < h.ops.size(); ++k) {
    EXPECT_EQ(h.ops[k].id, static_cast<OpId>(k));
    where[Key{h.ops[k].name, h.ops[k].inputs, h.ops[k].outputs}] = k;
  }
  ASSERT_EQ(where.size(), g.ops.size());
  std::vector<size_t> pos(g.ops.size());
  for (size_t i = 0; i < g.ops.size(); ++i) {
    auto it = where.find(Key{g.ops[i].name, g.ops[i].inputs, g.ops[i].outputs});
    ASSERT_NE(it, where.end()) << g.ops[i].name;
    pos[i] = it->second;
  }
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& a = g.ops[i];
    const Op& moved = h.ops[pos[i]];
    EXPECT_EQ(moved.type, a.type);
    if (a.forward_op != kNoOp) {
      EXPECT_EQ(static_cast<size_t>(moved.forward_op), pos[static_cast<size_t>(a.forward_op)]);
    }
    for (size_t j = i + 1; j < g.ops.size(); ++j) {
      // Conflicting ops keep their order; ops that are not updates keep theirs whatever they touch.
      if (conflict(a, g.ops[j]) || (a.phase != Phase::kUpdate && g.ops[j].phase != Phase::kUpdate)) {
        EXPECT_LT(pos[i], pos[j]) << a.name << " / " << g.ops[j].name;
      }
    }
  }
  // As early as it can: the op just before each update conflicts with it, or is an update
  // anchored to the same op (where a run of updates follows one op).
  size_t into_backward = 0;
  for (size_t k = 0; k < h.ops.size(); ++k) {
    const Op& u = h.ops[k];
    if (u.phase != Phase::kUpdate) continue;
    ASSERT_GT(k, 0u);
    size_t q = k - 1;
    while (q > 0 && h.ops[q].phase == Phase::kUpdate && !conflict(h.ops[q], u)) --q;
    EXPECT_TRUE(conflict(h.ops[q], u)) << u.name << " could run before " << h.ops[q].name;
    into_backward += k + 1 < h.ops.size() && std::any_of(h.ops.begin() + static_cast<std::ptrdiff_t>(k), h.ops.end(),
                                                         [](const Op& o) { return o.phase == Phase::kBackward; });
  }
  EXPECT_GT(into_backward, 0u);
  // Interleaving an interleaved graph changes nothing.
  Result<Graph> again = interleave_updates(h);
  ASSERT_TRUE(again.ok());
  for (size_t k = 0; k < h.ops.size(); ++k) EXPECT_EQ(again->ops[k].name, h.ops[k].name);
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, Interleave,
    ::testing::Values(std::make_tuple("resnet-mini", OptimizerKind::kSgd, Precision::kFp32),
                      std::make_tuple("densenet-mini", OptimizerKind::kAdam, Precision::kFp32),
                      std::make_tuple("gpt2-mini", OptimizerKind::kAdam, Precision::kFp32),
                      std::make_tuple("gpt2-mini", OptimizerKind::kAdam, Precision::kAmpFp16),
                      std::make_tuple("bert-mini", OptimizerKind::kSgd, Precision::kAmpBf16)));

// The tied embedding of GPT-2 (read by the first and the last forward op, its gradient
// accumulated twice): its update waits for the last accumulation, after the embedding's backward.
TEST(Interleave, ATiedWeightWaitsForItsLastGradient) {
  const Graph h = interleave_updates(model("gpt2-mini", OptimizerKind::kAdam)).value();
  for (size_t k = 0; k < h.ops.size(); ++k) {
    const Op& u = h.ops[k];
    if (u.phase != Phase::kUpdate) continue;
    const TensorId grad = u.inputs[1];
    for (size_t j = k + 1; j < h.ops.size(); ++j) {
      EXPECT_FALSE(h.ops[j].writes(grad)) << u.name << " runs before " << h.ops[j].name << " writes its gradient";
      for (TensorId t : u.outputs)
        EXPECT_TRUE(std::find(h.ops[j].inputs.begin(), h.ops[j].inputs.end(), t) == h.ops[j].inputs.end() ||
                    h.ops[j].phase == Phase::kUpdate)
            << h.ops[j].name << " reads " << h.tensor(t).name << " after its update";
    }
  }
}

TEST(Interleave, NamesAndAGraphWithoutUpdates) {
  EXPECT_EQ(update_order_from_string("end"), UpdateOrder::kEnd);
  EXPECT_EQ(update_order_from_string("interleaved"), UpdateOrder::kInterleaved);
  EXPECT_FALSE(update_order_from_string("late"));
  EXPECT_EQ(to_string(UpdateOrder::kInterleaved), "interleaved");
  Graph g = model("resnet-mini", OptimizerKind::kSgd);
  std::erase_if(g.ops, [](const Op& op) { return op.phase == Phase::kUpdate; });
  Result<Graph> h = interleave_updates(g);
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_EQ(h->ops.size(), g.ops.size());
  for (size_t k = 0; k < g.ops.size(); ++k) EXPECT_EQ(h->ops[k].name, g.ops[k].name);
  EXPECT_EQ(update_order_of(*h), UpdateOrder::kEnd);
}

}  // namespace
}  // namespace ferry
