// Measured figures: what a training run observed of its own op and transfer times, in the terms
// the cost model plans with (an op time per op, a latency and a bandwidth per link), so that a
// plan can be made from what this machine really does instead of a shipped profile.
//
// Design
// - Op times are the executor's wall time of every op (ExecutorOptions::record_op_times), taken
//   under the real budget, with the plan's transfers running beside them: what the op costs in
//   this run, contention included.
// - Transfers are fitted per link. A transfer record's duration runs from when the transfer
//   engine's worker began moving bytes to completion (queueing excluded). Host-tier swap-outs fit
//   the device->host link and swap-ins the host->device link. An SSD-tier transfer crosses the
//   host leg and then the disk (CostModel::transfer_us), so the disk's link is fitted to the
//   duration minus the host leg's predicted time (with the host link as measured, else as the
//   profile has it); on a device_direct profile a raw SSD transfer has no host leg, and its whole
//   duration is the disk's.
// - A fit is time = latency + bytes / bandwidth by least squares when the sizes vary, else the
//   bandwidth of the summed bytes over the summed time with no latency; figures are clamped to
//   what validate_profile accepts, so a plan made from them is always finite.
//   Transfers of tensors whose SSD copies were coded (the plan's Schedule::ssd_codecs) do not fit
//   the disk's link: their time is the codec's pipeline, not the disk's.
// - Codec figures are what the SSD tier measured of each lossless codec on each class of tensor
//   (ExecutorOptions::ssd_measure_codecs): the cost model predicts coded transfers with them and
//   the planners choose codecs by them (CostOptions::codecs).
// - Merging keeps, per op, the smaller time (the first iteration pays one-time costs: page
//   faults, cold caches), per link the newer fit, and per (class, codec) the newer figure. A link
//   or codec the latest iterations did not use keeps the figure the running plan was made from
//   (with_known_links), so that no figure measured once falls back to the device profile's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "cost/profile.h"
#include "graph/graph.h"
#include "runtime/transfer_engine.h"
#include "schedule/schedule.h"

namespace ferry {

struct LinkFit {
  double bytes_per_s = 0;
  double latency_us = 0;
  size_t samples = 0;
  uint64_t bytes = 0;  // summed over the samples
  bool operator==(const LinkFit&) const = default;
};

struct MeasuredFigures {
  std::vector<double> op_us;                              // per op, measured wall time
  std::array<std::optional<LinkFit>, kNumLinks> links{};  // per cost-model Link; nullopt: not measured
  std::vector<CodecFigure> codecs;                        // per class and codec, sorted; rates finite
  bool operator==(const MeasuredFigures&) const = default;
};

// Fits an iteration's op times (per op, as Executor::op_times_us) and transfer records (as
// Executor::last_transfers) into figures; `base` gives the host leg of SSD transfers when the
// iteration moved nothing through the host tier. `codecs`: the SSD tier's codec figures
// (Executor::ssd_codec_figures; infinite rates are capped at 1e15 bytes/s); `coded`: the tensors
// whose SSD copies the plan codes (their transfers fit no link).
MeasuredFigures fit_figures(const std::vector<double>& op_us, const std::vector<TransferRecord>& transfers,
                            const CostModel& base, const std::vector<CodecFigure>& codecs = {},
                            const std::vector<TensorCodec>& coded = {});

// `newer` merged into `older` (Design).
MeasuredFigures merge_figures(const MeasuredFigures& older, const MeasuredFigures& newer);
// `recent` (what the last iterations measured) with the links and codec figures it lacks taken
// from `known` (what the running plan was made from): a plan that stops using a link (the disk
// after a re-plan moved everything off it) measures nothing of it, and its next plans and the
// profile cache must keep the link's measured figure instead of falling back to the device
// profile's. Op times are recent's alone (the latest iterations are what drift is judged on).
MeasuredFigures with_known_links(MeasuredFigures recent, const MeasuredFigures& known);

// Op times measured under a plan whose copies slowed the ops beside them (compute interference),
// each divided by the stretch the simulator predicted for it (SimResult::op_stretch): the ops' own
// times, which a prediction stretches again for its own plan. `stretch` empty (no interference)
// or of another length: `measured` unchanged.
std::vector<double> unstretched_op_times(std::vector<double> measured, const std::vector<double>& stretch);

// The graph with every op's time_us set to the measured one (`g` must have as many ops).
void apply_op_times(const MeasuredFigures& f, Graph& g);
// `p` with the measured links in place of its own (efficiency 1, the measured rate as nominal).
HardwareProfile apply_links(const MeasuredFigures& f, HardwareProfile p);
// The cost options that predict with `f`'s codec figures.
CostOptions cost_options(const MeasuredFigures& f);

// How far apart two sets of figures are, as the largest relative change (|b/a - 1|) of the
// iteration's summed op time and of each link's time for a 1 MiB transfer, over the links both
// measured. 0 for identical figures.
struct FiguresChange {
  double relative = 0;
  std::string what;  // "ssd_write 4.02x slower", "op time 1.21x"
};
FiguresChange compare_figures(const MeasuredFigures& a, const MeasuredFigures& b);

}  // namespace ferry
