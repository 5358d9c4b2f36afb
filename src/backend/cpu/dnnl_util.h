// Helpers around oneDNN for the CPU backend: the one error wrapper, memory descriptors, names.
//
// Every oneDNN call that can throw runs inside dnnl_guard(), which turns dnnl::error into a
// Status (and StatusError, thrown by setup code deep inside a kernel factory, back into its
// Status), so no exception leaves the backend.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "common/status.h"
#include "graph/graph.h"

namespace ferry::cpu {

using Md = dnnl::memory::desc;
using Dims = dnnl::memory::dims;
using DataType = dnnl::memory::data_type;

// The Status for a oneDNN failure while doing `what`.
Status status_from_dnnl(const dnnl::error& e, std::string_view what);

// Runs `fn` (returning Status or void) and converts anything it throws into a Status prefixed
// with `what`.
template <typename Fn>
Status dnnl_guard(std::string_view what, Fn&& fn) {
  try {
    if constexpr (std::is_same_v<decltype(fn()), void>) {
      fn();
      return Status::Ok();
    } else {
      return fn();
    }
  } catch (const dnnl::error& e) {
    return status_from_dnnl(e, what);
  } catch (const StatusError& e) {
    return e.status.with_context(std::string(what));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(std::string(what) + ": host memory exhausted");
  }
}

// Throws StatusError(InvalidArgument) with `msg`; for setup code that validates graph attributes.
[[noreturn]] void fail_invalid(std::string msg);
[[noreturn]] void fail_unsupported(std::string msg);

// The oneDNN data type of `dtype`; fails (Unsupported) for i64, which oneDNN 2.6 lacks.
DataType dnnl_type(DType dtype, std::string_view tensor_name);

// Dense row-major descriptor of `dims` (scalars use dims {1}).
Md plain_md(const Dims& dims, DataType type);
// The plain descriptor of a graph tensor in its logical shape.
Md plain_md(const Tensor& t);
// Dense row-major with the dims and data type of `md` (no padding).
Md plain_like(const Md& md);
// `md` with another data type (same dims, same physical order and blocking).
Md retype(const Md& md, DataType type);
// True when `md` is dense row-major with no padding and no offset.
bool is_plain(const Md& md);
// Number of logical elements of `md`.
int64_t md_numel(const Md& md);
// `md` viewed with `dims` (same numel) when the layout allows it without moving data, else a
// zero descriptor (check with is_zero()).
Md try_reshape(const Md& md, const Dims& dims);
inline bool is_zero(const Md& md) { return md.data.ndims == 0; }

// Layout in oneDNN tag notation: "abcd" (plain NCHW), "aBcd16b" (nChw16c), "acdb" (NHWC).
std::string layout_name(const Md& md);

// Attribute set asking for a user-provided scratchpad (so that every byte is counted).
dnnl::primitive_attr user_scratchpad_attr();

// True when the primitive descriptor fell back to a reference (slow, scalar) implementation.
bool is_reference_impl(const dnnl::primitive_desc_base& pd);

}  // namespace ferry::cpu
