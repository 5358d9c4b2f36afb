// Optimizer updates: the loops of backend/host_optimizer.h (which states the arithmetic) run over
// the weight's storage in the arena, the same code the runtime runs on tier copies when a plan
// puts an update on the host.
//
// The weight, its gradient and its optimizer state share one layout (Note [Layouts]), so the
// update runs over the whole buffer, padding included: padding is 0 in every operand and every
// update maps zeros to zeros. Weights and state are updated in place (outputs alias inputs).
#include "backend/host_optimizer.h"

#include <fmt/format.h>

#include "backend/cpu/kernel.h"

namespace ferry::cpu {
namespace {

// Binds every input and output in the weight's layout; returns the number of f32 elements.
int64_t bind_all(Kernel& k, const OpSetup& s) {
  s.require(s.in_tensor(0).dtype == DType::kF32, "weight must be f32");
  const Md md = s.input_or(0, plain_md(s.in_tensor(0)));  // plain if no forward op used it
  for (size_t i = 0; i < s.op.inputs.size(); ++i) {
    s.require(s.in_tensor(i).numel() == s.in_tensor(0).numel(),
              fmt::format("'{}' does not have the weight's size", s.in_tensor(i).name));
    k.read_input(i, s.in[i].value_or(md), md);
  }
  for (size_t i = 0; i < s.op.outputs.size(); ++i) k.write_output(i, s.out[i].value_or(md), md);
  return static_cast<int64_t>(md.get_size() / sizeof(float));
}

std::unique_ptr<Kernel> sgd(const OpSetup& s) {
  const OpAttrs at = s.op.attrs;
  const bool momentum = s.op.inputs.size() == 3;
  s.expect_arity(2, 3, momentum ? 2 : 1, momentum ? 2 : 1);
  s.require(s.op.outputs[0] == s.op.inputs[0] && (!momentum || s.op.outputs[1] == s.op.inputs[2]),
            "sgd_update must write its weight (and momentum) in place");
  s.require(momentum == (at.momentum_sgd > 0), "a momentum buffer is given iff momentum > 0");
  auto k = new_kernel(s);
  const int64_t n = bind_all(*k, s);
  k->set_body([n, at, momentum](const ExecArgs& a) {
    sgd_update_loop(n, at, a.in_as<const float>(0), a.in_as<const float>(1), a.out_as<float>(0),
                    momentum ? a.in_as<const float>(2) : nullptr, momentum ? a.out_as<float>(1) : nullptr);
    return Status::Ok();
  });
  return k;
}

std::unique_ptr<Kernel> adam(const OpSetup& s) {
  const OpAttrs at = s.op.attrs;
  s.expect_arity(4, 4, 3, 3);
  s.require(s.op.outputs[0] == s.op.inputs[0] && s.op.outputs[1] == s.op.inputs[2] && s.op.outputs[2] == s.op.inputs[3],
            "adam_update must write {w, m, v} in place");
  s.require(at.beta1 >= 0 && at.beta1 < 1 && at.beta2 >= 0 && at.beta2 < 1 && at.adam_eps > 0,
            fmt::format("bad Adam settings beta1={} beta2={} eps={}", at.beta1, at.beta2, at.adam_eps));
  auto k = new_kernel(s);
  const int64_t n = bind_all(*k, s);
  k->set_body([n, at, name = s.op.name](const ExecArgs& a) {
    Status st = adam_update_loop(n, at, a.ctx().optimizer_step, a.in_as<const float>(0), a.in_as<const float>(1),
                                 a.in_as<const float>(2), a.in_as<const float>(3), a.out_as<float>(0),
                                 a.out_as<float>(1), a.out_as<float>(2));
    return st.ok() ? st : Status::InvalidArgument(fmt::format("op '{}': {}", name, st.message()));
  });
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_optimizer_kernel(const OpSetup& s) {
  return s.op.type == OpType::kSgdUpdate ? sgd(s) : adam(s);
}

}  // namespace ferry::cpu
