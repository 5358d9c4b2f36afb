// Trace import and export; the format itself is specified in docs/trace-format.md.
//
// Design
// - Import is one pass over the parsed document with a single rule: check a value's type and range
//   before using it. Field readers receive the JSON path of the value and throw a StatusError that
//   names it; parse_trace() is the only place that catches (nlohmann's exceptions included), so
//   the readers need no error plumbing and nothing escapes the public functions.
// - Tensors are read first, mapping the file's ids to dense ids in file order; ops resolve their
//   tensor references through that map. A view (version 2) maps to its storage's dense id and adds
//   no tensor: the graph is over storages and their versions, which is what memory is held by; a
//   view's byte count survives only in the derived bytes_read of the ops that name it. Structure (produce before use, one producer, persistent
//   tensors written only by updates) is left to Graph::validate(), the same check every built
//   graph passes, so a trace cannot mean something a built graph could not.
// - Sums the rest of Ferry takes (bytes of all tensors, flops and bytes over all ops) are checked
//   for 64-bit overflow here, once, so analysis and cost code can add without checking.
// - OpAttrs is described once, in kAttrFields (name, member, lower bound). Export, import and
//   graph_difference() all walk that table, so a new attribute is one line here.
// - Export leaves out fields equal to their defaults and writes a float as the shortest decimal
//   that reads back to the same float; every other number is written exactly. Hence
//   export -> import is lossless, which the tests check field by field with graph_difference().
#include "graph/trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "common/file_io.h"
#include "common/units.h"

namespace ferry {

namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// The attribute table.

using AttrMember = std::variant<int32_t OpAttrs::*, int64_t OpAttrs::*, bool OpAttrs::*, float OpAttrs::*>;

struct AttrField {
  std::string_view name;
  AttrMember member;
  int64_t min_value;  // smallest accepted value of an integer field (ignored for bool and float)
};

constexpr int64_t kAnyInt = std::numeric_limits<int32_t>::min();

const std::array<AttrField, 28> kAttrFields = {{
    {"kernel_h", &OpAttrs::kernel_h, 0},
    {"kernel_w", &OpAttrs::kernel_w, 0},
    {"stride_h", &OpAttrs::stride_h, 1},
    {"stride_w", &OpAttrs::stride_w, 1},
    {"pad_h", &OpAttrs::pad_h, 0},
    {"pad_w", &OpAttrs::pad_w, 0},
    {"groups", &OpAttrs::groups, 1},
    {"has_bias", &OpAttrs::has_bias, 0},
    {"count_include_pad", &OpAttrs::count_include_pad, 0},
    {"in_features", &OpAttrs::in_features, 0},
    {"transpose_a", &OpAttrs::transpose_a, 0},
    {"transpose_b", &OpAttrs::transpose_b, 0},
    {"scale", &OpAttrs::scale, 0},
    {"causal", &OpAttrs::causal, 0},
    {"eps", &OpAttrs::eps, 0},
    {"momentum", &OpAttrs::momentum, 0},
    {"gelu_tanh", &OpAttrs::gelu_tanh, 0},
    {"dropout_p", &OpAttrs::dropout_p, 0},
    {"axis", &OpAttrs::axis, kAnyInt},
    {"class_axis", &OpAttrs::class_axis, -1},
    {"heads", &OpAttrs::heads, 0},
    {"parts", &OpAttrs::parts, 1},
    {"lr", &OpAttrs::lr, 0},
    {"momentum_sgd", &OpAttrs::momentum_sgd, 0},
    {"beta1", &OpAttrs::beta1, 0},
    {"beta2", &OpAttrs::beta2, 0},
    {"adam_eps", &OpAttrs::adam_eps, 0},
    {"weight_decay", &OpAttrs::weight_decay, 0},
}};

// A tripwire, not a layout requirement: when OpAttrs gains a field its size changes, and the field
// must then be added to kAttrFields (and to docs/trace-format.md), or traces silently drop it.
static_assert(sizeof(void*) != 8 || sizeof(OpAttrs) == 112,
              "OpAttrs changed: add the new field to kAttrFields in trace.cc, then update this size");

const AttrField* find_attr(std::string_view name) {
  for (const AttrField& f : kAttrFields)
    if (f.name == name) return &f;
  return nullptr;
}

// The double whose JSON form is the shortest decimal that reads back (through a double) as exactly
// `f`: 0.1f is written 0.1 rather than 0.10000000149011612. from_chars, unlike strtod, ignores the
// locale.
double float_for_json(float f) {
  const std::string s = fmt::format("{}", f);
  double d = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  const bool exact = ec == std::errc() && end == s.data() + s.size() && static_cast<float>(d) == f;
  return exact ? d : static_cast<double>(f);
}

// ---------------------------------------------------------------------------------------------
// Messages.

// Text from the file as it appears in messages: cut to a readable length on a UTF-8 boundary.
std::string shortened(const std::string& text) {
  constexpr size_t kMaxShown = 64;
  if (text.size() <= kMaxShown) return text;
  size_t cut = kMaxShown - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

std::string in_quotes(const std::string& name) {
  std::string s = "'";  // built with += : GCC 12 warns falsely (-Wrestrict) on "'" + s + "'"
  s += shortened(name);
  s += '\'';
  return s;
}

// A JSON value as it appears in messages ("got -5", "got \"abc\"", "got an array").
std::string describe(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return v.dump();
    case Json::value_t::string:
      return fmt::format("\"{}\"", shortened(v.get_ref<const std::string&>()));
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

// Messages are one line whatever the names in the file contain.
std::string one_line(std::string s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw StatusError{Status::InvalidArgument(where.empty() ? what : where + ": " + what)};
}

std::string field(const std::string& where, std::string_view key) {
  return where.empty() ? std::string(key) : where + "." + std::string(key);
}

std::string element(std::string_view array, size_t i) { return fmt::format("{}[{}]", array, i); }

// ---------------------------------------------------------------------------------------------
// Typed readers. Each checks the value's JSON type and range and throws naming `path`.

const Json* find_field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const Json& require_field(const Json& obj, const std::string& where, const char* key) {
  const Json* v = find_field(obj, key);
  if (v == nullptr) fail(where, fmt::format("missing required field '{}'", key));
  return *v;
}

void expect_object(const Json& v, const std::string& path) {
  if (!v.is_object()) fail(path, "expected an object, got " + describe(v));
}

void expect_array(const Json& v, const std::string& path) {
  if (!v.is_array()) fail(path, "expected an array, got " + describe(v));
}

// Rejects fields that are not in `allowed`, so that a typo ("time_ms") is not silently ignored.
// Fields starting with "x_" are extensions and are skipped.
void check_fields(const Json& obj, const std::string& where, std::initializer_list<std::string_view> allowed) {
  for (const auto& item : obj.items()) {
    const std::string& key = item.key();
    if (key.starts_with("x_")) continue;
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    fail(where, fmt::format("unknown field {} (expected one of: {}; extension fields start with x_)", in_quotes(key),
                            fmt::join(allowed, ", ")));
  }
}

uint64_t read_uint(const Json& v, const std::string& path) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  fail(path, "expected a non-negative integer, got " + describe(v));
}

// An integer in [min_value, max_value]; JSON integers arrive as int64 or, when non-negative, uint64.
int64_t read_int(const Json& v, const std::string& path, int64_t min_value, int64_t max_value) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(max_value) && static_cast<int64_t>(u) >= min_value) return static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x >= min_value && x <= max_value) return x;
  }
  if (min_value == 0 && max_value == std::numeric_limits<int64_t>::max())
    fail(path, "expected a non-negative integer, got " + describe(v));
  fail(path, fmt::format("expected an integer in [{}, {}], got {}", min_value, max_value, describe(v)));
}

const std::string& read_string(const Json& v, const std::string& path) {
  if (!v.is_string()) fail(path, "expected a string, got " + describe(v));
  return v.get_ref<const std::string&>();
}

bool read_bool(const Json& v, const std::string& path) {
  if (!v.is_boolean()) fail(path, "expected true or false, got " + describe(v));
  return v.get<bool>();
}

double read_time_us(const Json& v, const std::string& path) {
  if (v.is_number()) {
    double t = v.get<double>();
    if (std::isfinite(t) && t >= 0 && t <= kMaxTraceOpTimeUs) return t;
  }
  fail(path, fmt::format("expected a finite non-negative number of microseconds (at most {:g}), got {}",
                         kMaxTraceOpTimeUs, describe(v)));
}

float read_float(const Json& v, const std::string& path) {
  if (v.is_number()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::fabs(d) <= static_cast<double>(FLT_MAX)) return static_cast<float>(d);
  }
  fail(path, "expected a finite number within the range of a 32-bit float, got " + describe(v));
}

template <typename E, size_t N>
E read_enum(const Json& v, const std::string& path, std::optional<E> (*from_string)(std::string_view),
            const std::array<E, N>& all, std::string_view what) {
  std::optional<E> e = v.is_string() ? from_string(v.get_ref<const std::string&>()) : std::nullopt;
  if (e) return *e;
  std::vector<std::string_view> names;
  for (E x : all) names.push_back(to_string(x));
  fail(path, fmt::format("expected a {} ({}), got {}", what, fmt::join(names, ", "), describe(v)));
}

constexpr std::array<TensorRole, 8> kAllRoles = {
    TensorRole::kInput,          TensorRole::kWeight,         TensorRole::kActivation, TensorRole::kGradient,
    TensorRole::kWeightGradient, TensorRole::kOptimizerState, TensorRole::kWorkspace,  TensorRole::kWeightCopy};
constexpr std::array<Precision, 4> kAllPrecisions = {Precision::kFp32, Precision::kTf32, Precision::kAmpFp16,
                                                     Precision::kAmpBf16};
constexpr std::array<Layout, 2> kAllLayouts = {Layout::kNhwc, Layout::kNchw};
constexpr std::array<DType, 6> kAllDTypes = {DType::kF32, DType::kF16, DType::kBF16,
                                             DType::kI32, DType::kI64, DType::kU8};
constexpr std::array<Phase, 3> kAllPhases = {Phase::kForward, Phase::kBackward, Phase::kUpdate};

std::optional<OptimizerKind> optimizer_from_string(std::string_view s) {
  if (s == "sgd") return OptimizerKind::kSgd;
  if (s == "adam") return OptimizerKind::kAdam;
  return std::nullopt;
}

// Sum of bytes_of(id) over the distinct ids in `ids`; nullopt on overflow or when bytes_of gives
// nullopt (an id out of range).
template <typename Id, typename BytesOf>
std::optional<uint64_t> distinct_bytes(std::vector<Id> ids, BytesOf bytes_of) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::optional<uint64_t> sum = 0;
  for (Id id : ids) {
    const std::optional<uint64_t> b = bytes_of(id);
    if (!b) return std::nullopt;
    sum = checked_add(*sum, *b);
    if (!sum) return std::nullopt;
  }
  return sum;
}

// The same over graph tensor ids.
std::optional<uint64_t> distinct_bytes(const std::vector<Tensor>& tensors, const std::vector<TensorId>& ids) {
  return distinct_bytes(ids, [&](TensorId id) -> std::optional<uint64_t> {
    if (id < 0 || static_cast<size_t>(id) >= tensors.size()) return std::nullopt;
    return tensors[static_cast<size_t>(id)].bytes;
  });
}

// ---------------------------------------------------------------------------------------------
// Import.

class TraceReader {
 public:
  // Converts the document to a Graph; throws StatusError naming the field at fault.
  Graph read(const Json& root) {
    if (!root.is_object()) fail("", "expected a JSON object at the top level, got " + describe(root));
    read_header(root);
    check_fields(root, "", {"format", "version", "model", "info", "tensors", "ops", "loss"});
    g_.info.model = read_string(require_field(root, "", "model"), "model");
    if (const Json* info = find_field(root, "info")) read_info(*info);
    read_tensors(require_field(root, "", "tensors"));
    read_ops(require_field(root, "", "ops"));
    if (const Json* loss = find_field(root, "loss")) g_.loss = resolve(read_uint(*loss, "loss"), "loss");
    return std::move(g_);
  }

 private:
  void read_header(const Json& root) {
    const Json* format = find_field(root, "format");
    if (format == nullptr)
      fail("", fmt::format("missing required field 'format' (a Ferry trace starts with \"format\": \"{}\")",
                           kTraceFormatName));
    if (!format->is_string() || format->get_ref<const std::string&>() != kTraceFormatName)
      fail("format", fmt::format("expected \"{}\", got {}", kTraceFormatName, describe(*format)));
    const Json& version = require_field(root, "", "version");
    if (!version.is_number_integer()) fail("version", "expected an integer, got " + describe(version));
    if (!(version.is_number_unsigned() && version.get<uint64_t>() >= 1 &&
          version.get<uint64_t>() <= static_cast<uint64_t>(kTraceVersion)))
      fail("version", fmt::format("unsupported trace version {} (this build of Ferry reads versions 1 to {})",
                                  describe(version), kTraceVersion));
    version_ = version.get<int>();
  }

  // A version-2 field in a version-1 trace is an error that says so, not "unknown field".
  void check_version2(const Json& entry, const std::string& where, std::initializer_list<const char*> keys) const {
    if (version_ >= 2) return;
    for (const char* k : keys)
      if (find_field(entry, k) != nullptr)
        fail(field(where, k), "this field is part of trace format version 2; the trace says \"version\": 1");
  }

  void read_info(const Json& info) {
    expect_object(info, "info");
    check_fields(info, "info", {"batch", "image", "seq", "num_classes", "optimizer", "precision", "layout"});
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    if (const Json* v = find_field(info, "batch")) g_.info.batch = read_int(*v, "info.batch", 0, kMax);
    if (const Json* v = find_field(info, "image")) g_.info.image = read_int(*v, "info.image", 0, kMax);
    if (const Json* v = find_field(info, "seq")) g_.info.seq = read_int(*v, "info.seq", 0, kMax);
    if (const Json* v = find_field(info, "num_classes"))
      g_.info.num_classes = read_int(*v, "info.num_classes", 0, kMax);
    if (const Json* v = find_field(info, "optimizer")) {
      std::optional<OptimizerKind> k = v->is_string() ? optimizer_from_string(v->get<std::string>()) : std::nullopt;
      if (!k) fail("info.optimizer", "expected \"sgd\" or \"adam\", got " + describe(*v));
      g_.info.optimizer = *k;
    }
    if (const Json* v = find_field(info, "precision"))
      g_.info.precision =
          read_enum(*v, "info.precision", precision_from_string, kAllPrecisions, "precision");
    if (const Json* v = find_field(info, "layout"))
      g_.info.layout = read_enum(*v, "info.layout", layout_from_string, kAllLayouts, "layout");
  }

  // "tensors[3] ('fc1.weight')": the path of an array element and, once known, its name.
  static std::string named(const std::string& path, const std::string& name) {
    return path + " (" + in_quotes(name) + ")";
  }

  // Reads the required "name" first, so that every later message about this entry can show it.
  static std::string read_entry_name(const Json& entry, const std::string& path) {
    expect_object(entry, path);
    return read_string(require_field(entry, path, "name"), field(path, "name"));
  }

  static void check_count(const Json& array, const char* what) {
    if (array.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      fail(what, fmt::format("{} entries is more than Ferry's ids can index", array.size()));
  }

  void read_tensors(const Json& tensors) {
    expect_array(tensors, "tensors");
    check_count(tensors, "tensors");
    g_.tensors.reserve(tensors.size());
    // Fields naming tensors may name ones listed later, so they are resolved once all ids are known.
    // (dense id, entry index in `tensors`, file id or op index)
    std::vector<std::tuple<size_t, size_t, uint64_t>> grad_of, overwrites, free_after;
    tensors_ = &tensors;
    uint64_t total_bytes = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Json& entry = tensors[i];
      const std::string path = element("tensors", i);
      Tensor t;
      t.id = static_cast<TensorId>(g_.tensors.size());
      t.name = read_entry_name(entry, path);
      const std::string where = named(path, t.name);
      check_version2(entry, where, {"view_of", "offset", "overwrites", "free_after"});
      const uint64_t file_id = read_uint(require_field(entry, where, "id"), field(where, "id"));
      if (find_field(entry, "view_of") != nullptr) {
        read_view(entry, where, file_id, i, t.name);
        continue;
      }
      check_fields(entry, where, {"id", "name", "bytes", "role", "shape", "dtype", "grad_of", "overwrites", "free_after"});
      add_id(file_id, t.id, i, where);
      t.role = read_enum(require_field(entry, where, "role"), field(where, "role"), role_from_string, kAllRoles,
                         "tensor role");
      if (const Json* v = find_field(entry, "dtype"))
        t.dtype = read_enum(*v, field(where, "dtype"), dtype_from_string, kAllDTypes, "dtype");
      t.bytes = read_bytes(entry, where);
      if (const Json* shape = find_field(entry, "shape")) read_shape(*shape, where, t);
      named_bytes_[file_id] = t.bytes;

      if (const Json* v = find_field(entry, "grad_of")) grad_of.emplace_back(t.id, i, read_uint(*v, field(where, "grad_of")));
      if (const Json* v = find_field(entry, "overwrites"))
        overwrites.emplace_back(t.id, i, read_uint(*v, field(where, "overwrites")));
      if (const Json* v = find_field(entry, "free_after"))
        free_after.emplace_back(t.id, i, read_uint(*v, field(where, "free_after")));
      std::optional<uint64_t> sum = checked_add(total_bytes, t.bytes);
      if (!sum) fail(field(where, "bytes"), fmt::format("the bytes of tensors[0..{}] overflow a 64-bit sum", i));
      total_bytes = *sum;
      g_.tensors.push_back(std::move(t));
    }
    for (const auto& [t, e, id] : grad_of) g_.tensors[t].grad_of = resolve(id, field(entry_where(e), "grad_of"));
    for (const auto& [t, e, id] : overwrites)
      g_.tensors[t].overwrites = resolve(id, field(entry_where(e), "overwrites"));
    for (const auto& [t, e, op] : free_after) {
      if (op >= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
        fail(field(entry_where(e), "free_after"), fmt::format("{} is not an op index", op));
      g_.tensors[t].free_after = static_cast<OpId>(op);  // checked against the ops by validate()
    }
  }

  // "tensors[3] ('fc1.weight')": an entry of `tensors` already read (so its name is a string).
  std::string entry_where(size_t entry) const {
    return named(element("tensors", entry), (*tensors_)[entry]["name"].get<std::string>());
  }

  void add_id(uint64_t file_id, TensorId dense, size_t entry, const std::string& where) {
    auto [it, inserted] = id_map_.emplace(file_id, FileId{dense, entry});
    if (!inserted)
      fail(field(where, "id"),
           fmt::format("duplicate tensor id {} (also the id of {})", file_id, entry_where(it->second.entry)));
  }

  static uint64_t read_bytes(const Json& entry, const std::string& where) {
    const uint64_t bytes = read_uint(require_field(entry, where, "bytes"), field(where, "bytes"));
    if (bytes > kMaxTraceTensorBytes)
      fail(field(where, "bytes"), fmt::format("{} bytes is over the limit of {} ({} bytes) for one tensor", bytes,
                                              format_bytes(kMaxTraceTensorBytes), kMaxTraceTensorBytes));
    return bytes;
  }

  // A view (version 2): bytes [offset, offset + bytes) of the storage of an earlier tensor. It
  // allocates nothing and is no tensor of the graph: every field naming it names that storage's
  // tensor, and only its byte count survives, in the derived bytes_read of the ops that read it.
  void read_view(const Json& entry, const std::string& where, uint64_t file_id, size_t index, const std::string& name) {
    check_fields(entry, where, {"id", "name", "view_of", "offset", "bytes", "role", "shape", "dtype"});
    const uint64_t base_file = read_uint(require_field(entry, where, "view_of"), field(where, "view_of"));
    auto base = id_map_.find(base_file);
    if (base == id_map_.end())
      fail(field(where, "view_of"), fmt::format("{} is not the id of an earlier tensor", base_file));
    const Tensor& root = g_.tensors[static_cast<size_t>(base->second.dense)];
    Tensor t;  // for the shape check only
    t.name = name;
    if (const Json* v = find_field(entry, "dtype"))
      t.dtype = read_enum(*v, field(where, "dtype"), dtype_from_string, kAllDTypes, "dtype");
    t.bytes = read_bytes(entry, where);
    if (const Json* shape = find_field(entry, "shape")) read_shape(*shape, where, t);
    if (const Json* v = find_field(entry, "role")) {
      const TensorRole role = read_enum(*v, field(where, "role"), role_from_string, kAllRoles, "tensor role");
      if (role != root.role)
        fail(field(where, "role"), fmt::format("a view has its storage's role, {} (of {}), not {}",
                                               to_string(root.role), in_quotes(root.name), to_string(role)));
    }
    uint64_t offset = 0;
    if (const Json* v = find_field(entry, "offset")) offset = read_uint(*v, field(where, "offset"));
    if (offset > root.bytes || t.bytes > root.bytes - offset)
      fail(where, fmt::format("the view's {} bytes at offset {} lie outside its storage {} of {} bytes", t.bytes,
                              offset, in_quotes(root.name), root.bytes));
    add_id(file_id, base->second.dense, index, where);
    named_bytes_[file_id] = t.bytes;
    views_.insert(file_id);
  }

  // Reads `shape` into t.shape and checks it against t.bytes: a shape is a claim about the size,
  // and a trace whose sizes contradict each other cannot be planned with confidence.
  static void read_shape(const Json& shape, const std::string& where, Tensor& t) {
    const std::string path = field(where, "shape");
    expect_array(shape, path);
    if (shape.size() > kMaxTraceShapeRank)
      fail(path, fmt::format("{} dimensions is more than the limit of {}", shape.size(), kMaxTraceShapeRank));
    uint64_t numel = 1;
    for (size_t k = 0; k < shape.size(); ++k) {
      int64_t d = read_int(shape[k], element(path, k), 0, std::numeric_limits<int64_t>::max());
      std::optional<uint64_t> n = checked_mul(numel, static_cast<uint64_t>(d));
      if (!n || *n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(path, fmt::format("the product of the dimensions exceeds 2^63 - 1 at dimension {}", k));
      numel = *n;
      t.shape.push_back(d);
    }
    std::optional<uint64_t> expected = checked_mul(numel, dtype_size(t.dtype));
    if (!expected || *expected != t.bytes)
      fail(field(where, "bytes"),
           fmt::format("{} bytes disagrees with shape [{}] of dtype {} ({} elements x {} bytes = {})", t.bytes,
                       fmt::join(t.shape, ", "), to_string(t.dtype), numel, dtype_size(t.dtype),
                       expected ? fmt::format("{}", *expected) : std::string("more than 2^64")));
  }

  void read_ops(const Json& ops) {
    expect_array(ops, "ops");
    check_count(ops, "ops");
    g_.ops.reserve(ops.size());
    std::array<uint64_t, 4> totals{};  // flops, macs, bytes_read, bytes_written over all ops
    for (size_t i = 0; i < ops.size(); ++i) {
      const Json& entry = ops[i];
      const std::string path = element("ops", i);
      Op op;
      op.id = static_cast<OpId>(i);
      op.name = read_entry_name(entry, path);
      const std::string where = named(path, op.name);
      check_fields(entry, where,
                   {"name", "type", "phase", "inputs", "outputs", "time_us", "flops", "macs", "bytes_read",
                    "bytes_written", "forward_op", "inplace", "attrs"});
      const Json& type = require_field(entry, where, "type");
      std::optional<OpType> t = type.is_string() ? op_type_from_string(type.get<std::string>()) : std::nullopt;
      if (!t)
        fail(field(where, "type"),
             fmt::format("unknown op type {} (record ops Ferry does not know as \"opaque\")", describe(type)));
      op.type = *t;
      op.phase = read_enum(require_field(entry, where, "phase"), field(where, "phase"), phase_from_string, kAllPhases,
                           "phase");
      std::vector<uint64_t> read_ids, written_ids;
      op.inputs = read_tensor_list(require_field(entry, where, "inputs"), field(where, "inputs"), read_ids, false);
      op.outputs =
          read_tensor_list(require_field(entry, where, "outputs"), field(where, "outputs"), written_ids, true);
      if (const Json* v = find_field(entry, "time_us")) op.time_us = read_time_us(*v, field(where, "time_us"));
      read_counters(entry, where, op, read_ids, written_ids);
      if (const Json* v = find_field(entry, "forward_op")) op.forward_op = read_forward_op(*v, where, i);
      if (const Json* v = find_field(entry, "inplace")) op.inplace_capable = read_bool(*v, field(where, "inplace"));
      if (const Json* v = find_field(entry, "attrs")) read_attrs(*v, field(where, "attrs"), op.attrs);

      const std::array<std::pair<const char*, uint64_t>, 4> counters = {
          {{"flops", op.flops}, {"macs", op.macs}, {"bytes_read", op.bytes_read}, {"bytes_written", op.bytes_written}}};
      for (size_t c = 0; c < counters.size(); ++c) {
        std::optional<uint64_t> sum = checked_add(totals[c], counters[c].second);
        if (!sum)
          fail(field(where, counters[c].first),
               fmt::format("{} summed over ops[0..{}] overflows 64 bits", counters[c].first, i));
        totals[c] = *sum;
      }
      g_.ops.push_back(std::move(op));
    }
  }

  // The dense ids of a list of tensor ids; `file_ids` gets the ids as written (views included).
  std::vector<TensorId> read_tensor_list(const Json& list, const std::string& path, std::vector<uint64_t>& file_ids,
                                         bool outputs) const {
    expect_array(list, path);
    std::vector<TensorId> ids;
    ids.reserve(list.size());
    for (size_t k = 0; k < list.size(); ++k) {
      const std::string p = element(path, k);
      const uint64_t id = read_uint(list[k], p);
      if (outputs && views_.contains(id))
        fail(p, fmt::format("{} is a view; an op writes whole tensors (an in-place write makes a new version of "
                            "the storage: a tensor with \"overwrites\")",
                            id));
      ids.push_back(resolve(id, p));
      file_ids.push_back(id);
    }
    return ids;
  }

  // flops and macs default to 0 (a trace need not know them); bytes_read and bytes_written
  // default to the bytes of the distinct tensors (or views) the op names.
  void read_counters(const Json& entry, const std::string& where, Op& op, const std::vector<uint64_t>& read_ids,
                     const std::vector<uint64_t>& written_ids) const {
    if (const Json* v = find_field(entry, "flops")) op.flops = read_uint(*v, field(where, "flops"));
    if (const Json* v = find_field(entry, "macs")) op.macs = read_uint(*v, field(where, "macs"));
    const std::array<std::tuple<const char*, uint64_t*, const std::vector<uint64_t>*>, 2> sizes = {
        {{"bytes_read", &op.bytes_read, &read_ids}, {"bytes_written", &op.bytes_written, &written_ids}}};
    for (const auto& [key, out, ids] : sizes) {
      if (const Json* v = find_field(entry, key)) {
        *out = read_uint(*v, field(where, key));
        continue;
      }
      const std::optional<uint64_t> derived =
          distinct_bytes(*ids, [&](uint64_t id) -> std::optional<uint64_t> { return named_bytes_.at(id); });
      if (!derived)
        fail(where, fmt::format("{} is absent and the bytes of the op's tensors overflow a 64-bit sum", key));
      *out = *derived;
    }
  }

  OpId read_forward_op(const Json& v, const std::string& where, size_t index) const {
    const std::string path = field(where, "forward_op");
    uint64_t f = read_uint(v, path);
    if (f >= index) fail(path, fmt::format("{} is not the index of an earlier op (this op is ops[{}])", f, index));
    const Op& fwd = g_.ops[f];
    if (fwd.phase != Phase::kForward)
      fail(path,
           fmt::format("ops[{}] ({}) is in phase {}, not a forward op", f, in_quotes(fwd.name), to_string(fwd.phase)));
    return static_cast<OpId>(f);
  }

  static void read_attrs(const Json& attrs, const std::string& path, OpAttrs& out) {
    expect_object(attrs, path);
    for (const auto& item : attrs.items()) {
      if (item.key().starts_with("x_")) continue;
      const std::string p = field(path, item.key());
      const AttrField* f = find_attr(item.key());
      if (f == nullptr)
        fail(path, fmt::format("unknown attribute {} (attributes are the fields of OpAttrs, listed in "
                               "docs/trace-format.md)",
                               in_quotes(item.key())));
      const Json& v = item.value();
      std::visit(
          [&](auto member) {
            using T = std::remove_reference_t<decltype(out.*member)>;
            if constexpr (std::is_same_v<T, bool>) {
              out.*member = read_bool(v, p);
            } else if constexpr (std::is_same_v<T, float>) {
              out.*member = read_float(v, p);
            } else {
              out.*member = static_cast<T>(read_int(
                  v, p, std::max<int64_t>(f->min_value, std::numeric_limits<T>::min()), std::numeric_limits<T>::max()));
            }
          },
          f->member);
    }
  }

  TensorId resolve(uint64_t file_id, const std::string& path) const {
    auto it = id_map_.find(file_id);
    if (it == id_map_.end()) fail(path, fmt::format("{} is not a tensor id", file_id));
    return it->second.dense;
  }

  Graph g_;
  int version_ = 1;
  struct FileId {
    TensorId dense;  // the graph tensor (a view's: its storage's)
    size_t entry;    // its entry in `tensors`, for messages
  };
  const Json* tensors_ = nullptr;              // the document's `tensors`, while it is read
  std::unordered_map<uint64_t, FileId> id_map_;  // id in the file -> FileId
  std::unordered_map<uint64_t, uint64_t> named_bytes_;  // id in the file -> its bytes (a view's range)
  std::unordered_set<uint64_t> views_;                  // ids in the file that are views
};

// "invalid JSON at byte offset 57 (line 3, column 12): syntax error while parsing ..."
std::string describe_parse_error(const Json::parse_error& e) {
  std::string what = e.what();
  std::string detail = what;
  size_t at = what.find("parse error");
  if (at != std::string::npos) detail = what.substr(at + std::strlen("parse error"));
  std::string position;
  if (detail.starts_with(" at ")) {
    size_t colon = detail.find(": ");
    position = detail.substr(4, colon == std::string::npos ? std::string::npos : colon - 4);
    detail = colon == std::string::npos ? "" : detail.substr(colon + 2);
  } else if (detail.starts_with(": ")) {
    detail = detail.substr(2);
  }
  uint64_t offset = e.byte > 0 ? e.byte - 1 : 0;
  return fmt::format("invalid JSON at byte offset {}{}: {}", offset, position.empty() ? "" : " (" + position + ")",
                     detail);
}

// ---------------------------------------------------------------------------------------------
// Export.

OrderedJson tensor_to_json(const Tensor& t) {
  OrderedJson j;
  j["id"] = t.id;
  j["name"] = t.name;
  j["role"] = std::string(to_string(t.role));
  if (t.dtype != DType::kF32) j["dtype"] = std::string(to_string(t.dtype));
  if (!t.shape.empty()) j["shape"] = t.shape;
  j["bytes"] = t.bytes;
  if (t.grad_of != kNoTensor) j["grad_of"] = t.grad_of;
  if (t.overwrites != kNoTensor) j["overwrites"] = t.overwrites;
  if (t.free_after != kNoOp) j["free_after"] = t.free_after;
  return j;
}

OrderedJson op_to_json(const Graph& g, const Op& op) {
  OrderedJson j;
  j["name"] = op.name;
  j["type"] = std::string(to_string(op.type));
  j["phase"] = std::string(to_string(op.phase));
  j["inputs"] = op.inputs;
  j["outputs"] = op.outputs;
  if (op.time_us) j["time_us"] = *op.time_us;
  if (op.flops != 0) j["flops"] = op.flops;
  if (op.macs != 0) j["macs"] = op.macs;
  if (distinct_bytes(g.tensors, op.inputs) != op.bytes_read) j["bytes_read"] = op.bytes_read;
  if (distinct_bytes(g.tensors, op.outputs) != op.bytes_written) j["bytes_written"] = op.bytes_written;
  if (op.forward_op != kNoOp) j["forward_op"] = op.forward_op;
  if (op.inplace_capable) j["inplace"] = true;
  OrderedJson attrs = OrderedJson::object();
  const OpAttrs defaults;
  for (const AttrField& f : kAttrFields) {
    std::visit(
        [&](auto member) {
          if (op.attrs.*member == defaults.*member) return;
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(op.attrs.*member)>, float>)
            attrs[std::string(f.name)] = float_for_json(op.attrs.*member);
          else
            attrs[std::string(f.name)] = op.attrs.*member;
        },
        f.member);
  }
  if (!attrs.empty()) j["attrs"] = std::move(attrs);
  return j;
}

// JSON on one line, with a space after ':' and ',' when `spaced` (nlohmann's compact form has
// none). Invalid UTF-8 in names is replaced rather than thrown on: export must not fail.
void dump_inline(const OrderedJson& v, bool spaced, std::string& out) {
  if (!spaced) {
    out += v.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  } else if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& item : v.items()) {
      if (!first) out += ", ";
      first = false;
      out += OrderedJson(item.key()).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
      out += ": ";
      dump_inline(item.value(), spaced, out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ", ";
      dump_inline(v[i], spaced, out);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  }
}

// ---------------------------------------------------------------------------------------------
// Comparison.

template <typename T>
std::string show(const T& v) {
  if constexpr (std::is_enum_v<T>) {
    return std::string(to_string(v));
  } else if constexpr (std::is_same_v<T, std::string>) {
    return in_quotes(v);
  } else if constexpr (std::is_same_v<T, std::optional<double>>) {
    return v ? fmt::format("{}", *v) : std::string("none");
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<int32_t>>) {
    return fmt::format("[{}]", fmt::join(v, ", "));
  } else {
    return fmt::format("{}", v);
  }
}

class Differ {
 public:
  // Records the first difference; returns true once one is found so callers can stop early.
  template <typename T>
  bool differ(const std::string& path, const T& a, const T& b) {
    if (!diff_.empty()) return true;
    if (a == b) return false;
    diff_ = fmt::format("{}: {} vs {}", path, show(a), show(b));
    return true;
  }
  const std::string& result() const { return diff_; }

 private:
  std::string diff_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public functions.

Result<Graph> parse_trace(std::string_view json_text, std::string_view source_name) {
  const std::string source = source_name.empty() ? std::string("<trace>") : std::string(source_name);
  try {
    if (json_text.size() > kMaxTraceTextBytes)
      return Status::InvalidArgument(one_line(fmt::format("{}: {} bytes of JSON is over the limit of {}", source,
                                                          json_text.size(), format_bytes(kMaxTraceTextBytes))));
    Json root;
    try {
      root = Json::parse(json_text.begin(), json_text.end());
    } catch (const Json::parse_error& e) {
      return Status::InvalidArgument(one_line(source + ": " + describe_parse_error(e)));
    } catch (const Json::exception& e) {  // e.g. out_of_range 406: a number literal past double's range
      std::string what = e.what();
      size_t bracket = what.find("] ");
      return Status::InvalidArgument(
          one_line(source + ": invalid JSON: " + (bracket == std::string::npos ? what : what.substr(bracket + 2))));
    }
    Graph g = TraceReader().read(root);
    Status st = g.validate();
    if (!st.ok()) return Status::InvalidArgument(one_line(source + ": " + st.message()));
    return g;
  } catch (const StatusError& e) {
    return Status::InvalidArgument(one_line(source + ": " + e.status.message()));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(fmt::format("{}: out of host memory while reading the trace", one_line(source)));
  } catch (const std::exception& e) {
    return Status::Internal(
        one_line(fmt::format("{}: unexpected error while reading the trace: {}", source, e.what())));
  }
}

int trace_version_needed(const Graph& g) {
  for (const Tensor& t : g.tensors)
    if (t.overwrites != kNoTensor || t.free_after != kNoOp) return 2;
  return 1;
}

Result<Graph> load_trace(const std::string& path) {
  // A path that does not name a readable regular file, or one over the size limit, is bad input
  // (exit code 2); a read that fails part-way is an I/O error.
  FERRY_ASSIGN_OR_RETURN(std::string text, read_regular_file(path, kMaxTraceTextBytes, "trace"));
  return parse_trace(text, path);
}

std::string to_trace_json(const Graph& g, bool pretty) {
  const char* nl = pretty ? "\n" : "";
  const char* indent = pretty ? "  " : "";
  const char* item_indent = pretty ? "    " : "";
  const char* sep = pretty ? " " : "";
  std::string out = "{";
  out += nl;
  auto key = [&](std::string_view k) {
    out += indent;
    out += fmt::format("\"{}\":{}", k, sep);
  };
  auto scalar = [&](std::string_view k, const OrderedJson& v, bool last = false) {
    key(k);
    dump_inline(v, pretty, out);
    out += last ? "" : ",";
    out += nl;
  };
  scalar("format", std::string(kTraceFormatName));
  scalar("version", trace_version_needed(g));
  scalar("model", g.info.model);
  OrderedJson info;
  info["batch"] = g.info.batch;
  info["image"] = g.info.image;
  info["seq"] = g.info.seq;
  info["num_classes"] = g.info.num_classes;
  info["optimizer"] = std::string(to_string(g.info.optimizer));
  if (g.info.precision != Precision::kFp32) info["precision"] = std::string(to_string(g.info.precision));
  if (g.info.layout != Layout::kNhwc) info["layout"] = std::string(to_string(g.info.layout));
  scalar("info", info);
  auto list = [&](std::string_view k, size_t n, auto&& item_json, bool last) {
    key(k);
    out += "[";
    out += n > 0 ? nl : "";
    for (size_t i = 0; i < n; ++i) {
      out += item_indent;
      dump_inline(item_json(i), pretty, out);
      out += i + 1 < n ? "," : "";
      out += nl;
    }
    if (n > 0) out += indent;
    out += last ? "]" : "],";
    out += nl;
  };
  const bool has_loss = g.loss != kNoTensor;
  list(
      "tensors", g.tensors.size(), [&](size_t i) { return tensor_to_json(g.tensors[i]); }, false);
  list(
      "ops", g.ops.size(), [&](size_t i) { return op_to_json(g, g.ops[i]); }, !has_loss);
  if (has_loss) scalar("loss", g.loss, true);
  out += "}";
  out += nl;
  return out;
}

Status save_trace(const Graph& g, const std::string& path) {
  try {
    return write_file_atomically(path, to_trace_json(g, true), "trace");
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(fmt::format("out of host memory while writing trace '{}'", path));
  }
}

std::string graph_difference(const Graph& a, const Graph& b) {
  Differ d;
  d.differ("info.model", a.info.model, b.info.model);
  d.differ("info.batch", a.info.batch, b.info.batch);
  d.differ("info.image", a.info.image, b.info.image);
  d.differ("info.seq", a.info.seq, b.info.seq);
  d.differ("info.num_classes", a.info.num_classes, b.info.num_classes);
  d.differ("info.optimizer", a.info.optimizer, b.info.optimizer);
  d.differ("info.precision", a.info.precision, b.info.precision);
  d.differ("info.layout", a.info.layout, b.info.layout);
  d.differ("loss", a.loss, b.loss);
  if (d.differ("tensors.size", a.tensors.size(), b.tensors.size())) return d.result();
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const Tensor& x = a.tensors[i];
    const Tensor& y = b.tensors[i];
    const std::string p = element("tensors", i);
    d.differ(p + ".id", x.id, y.id);
    d.differ(p + ".name", x.name, y.name);
    d.differ(p + ".shape", x.shape, y.shape);
    d.differ(p + ".dtype", x.dtype, y.dtype);
    d.differ(p + ".role", x.role, y.role);
    d.differ(p + ".bytes", x.bytes, y.bytes);
    d.differ(p + ".grad_of", x.grad_of, y.grad_of);
    d.differ(p + ".overwrites", x.overwrites, y.overwrites);
    if (d.differ(p + ".free_after", x.free_after, y.free_after)) return d.result();
  }
  if (d.differ("ops.size", a.ops.size(), b.ops.size())) return d.result();
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const Op& x = a.ops[i];
    const Op& y = b.ops[i];
    const std::string p = element("ops", i);
    d.differ(p + ".id", x.id, y.id);
    d.differ(p + ".name", x.name, y.name);
    d.differ(p + ".type", x.type, y.type);
    d.differ(p + ".phase", x.phase, y.phase);
    d.differ(p + ".inputs", x.inputs, y.inputs);
    d.differ(p + ".outputs", x.outputs, y.outputs);
    for (const AttrField& f : kAttrFields)
      std::visit([&](auto member) { d.differ(p + ".attrs." + std::string(f.name), x.attrs.*member, y.attrs.*member); },
                 f.member);
    d.differ(p + ".flops", x.flops, y.flops);
    d.differ(p + ".macs", x.macs, y.macs);
    d.differ(p + ".bytes_read", x.bytes_read, y.bytes_read);
    d.differ(p + ".bytes_written", x.bytes_written, y.bytes_written);
    d.differ(p + ".time_us", x.time_us, y.time_us);
    d.differ(p + ".forward_op", x.forward_op, y.forward_op);
    if (d.differ(p + ".inplace_capable", x.inplace_capable, y.inplace_capable)) return d.result();
  }
  return d.result();
}

}  // namespace ferry
