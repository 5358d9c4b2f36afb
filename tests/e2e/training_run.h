// Training a graph for a few iterations on the CPU executor, the way the end-to-end tests compare
// runs: the losses and the persistent tensors after the last iteration, with the executor kept for
// each test's own figures (peaks, transfers, tiers).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "data/data.h"
#include "graph/graph.h"
#include "runtime/executor.h"
#include "schedule/schedule.h"

namespace ferry::test {

struct TrainingRun {
  std::unique_ptr<Backend> backend;    // declared first: destroyed after the executor that uses it
  std::unique_ptr<Executor> executor;  // after the last iteration
  std::vector<float> losses;           // per iteration
  std::vector<std::vector<std::byte>> persistent;  // weights and optimizer state, in tensor order
  size_t recomputed_ops = 0;           // kernels run again, summed over iterations
};

// `iters` iterations of `g` under schedule `s` (nullptr: no plan) with executor options `o`, on
// synthetic data seeded with o.seed.
inline Result<TrainingRun> run_training(const Graph& g, const Schedule* s, const ExecutorOptions& o, int iters,
                                        const BackendOptions& bo = {}) {
  TrainingRun r;
  FERRY_ASSIGN_OR_RETURN(r.backend, make_backend("cpu", bo));
  FERRY_ASSIGN_OR_RETURN(r.executor, Executor::create(g, *r.backend, o, s));
  FERRY_RETURN_IF_ERROR(r.executor->initialize());
  std::unique_ptr<DataSource> data = make_synthetic_data(o.seed);
  for (int i = 0; i < iters; ++i) {
    FERRY_ASSIGN_OR_RETURN(IterationStats st, r.executor->run_iteration(i, *data));
    r.losses.push_back(st.loss);
    r.recomputed_ops += r.executor->last_recomputed_ops();
  }
  for (const Tensor& t : g.tensors)
    if (t.persistent()) {
      FERRY_ASSIGN_OR_RETURN(std::vector<std::byte> w, r.executor->read_persistent(t.id));
      r.persistent.push_back(std::move(w));
    }
  return r;
}

}  // namespace ferry::test
