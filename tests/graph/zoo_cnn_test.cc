// Tests of the CNN zoo (src/graph/zoo/cnn.cc): parameter counts against the reference
// implementations, forward MACs against published figures, input-size errors, and structure that
// the references fix (strides, biases, batch-norm eps, concatenations, feature-map sizes).
//
// Reference numbers come from outside Ferry: torchvision's model cards (parameters, GFLOPS, which
// are multiply-accumulates), timm's inception_v4 model card, and, for models without a published
// count (DenseNet-264, the mini models, the pre-activation ResNets), closed-form formulas written
// here from the architecture's definition, not by walking the graph under test. The DenseNet
// formula is itself checked against torchvision's published counts.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/zoo/zoo.h"

namespace ferry {
namespace {

// A config with the zoo's defaults (0) for whatever is not given.
ModelConfig config(int64_t batch, int64_t image = 0, int64_t num_classes = 0) {
  ModelConfig c;
  c.batch = batch;
  c.image = image;
  c.num_classes = num_classes;
  return c;
}

// Batch-1 graphs at the default size, built once per test binary: several tests read the same model.
const Graph& default_graph(const std::string& name) {
  static std::map<std::string, Graph> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Result<Graph> g = build_model(name, config(1));
    EXPECT_TRUE(g.ok()) << name << ": " << g.status().message();
    if (!g.ok()) {
      static const Graph kEmpty;
      return kEmpty;
    }
    it = cache.emplace(name, std::move(g).value()).first;
  }
  return it->second;
}

const Tensor* find_tensor(const Graph& g, const std::string& name) {
  for (const Tensor& t : g.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const Op* find_op(const Graph& g, const std::string& name) {
  for (const Op& op : g.ops)
    if (op.phase == Phase::kForward && op.name == name) return &op;
  return nullptr;
}

int count_forward(const Graph& g, OpType type) {
  int n = 0;
  for (const Op& op : g.ops) n += op.phase == Phase::kForward && op.type == type;
  return n;
}

// --- Closed-form parameter counts --------------------------------------------------------------

// DenseNet-BC: BN (2 per channel) and bias-free convs; bottleneck 1x1 to 4k, 3x3 to k; transitions
// halve the channels; final BN and a linear classifier with bias.
uint64_t densenet_params(const std::vector<int64_t>& blocks, int64_t k, int64_t init, bool imagenet_stem,
                         int64_t classes) {
  int64_t p = imagenet_stem ? 3 * init * 7 * 7 + 2 * init : 3 * init * 3 * 3;
  int64_t c = init;
  for (size_t b = 0; b < blocks.size(); ++b) {
    // Layer j reads c + j*k channels: sum over j of (2(c+jk) + (c+jk)*4k) plus its fixed part.
    const int64_t l = blocks[b];
    const int64_t in_sum = l * c + k * l * (l - 1) / 2;
    p += in_sum * (2 + 4 * k) + l * (2 * 4 * k + 4 * k * k * 9);
    c += l * k;
    if (b + 1 < blocks.size()) {
      p += 2 * c + c * (c / 2);
      c /= 2;
    }
  }
  p += 2 * c + c * classes + classes;
  return static_cast<uint64_t>(p);
}

// Pre-activation bottleneck ResNet for CIFAR, depth 9n+2 (He et al. 2016): stem conv 3->16, stages of
// n units with outputs 64/128/256 and bottleneck width out/4, projection shortcut on each stage's
// first unit, final BN and linear classifier.
uint64_t preact_params(int64_t n, int64_t classes) {
  auto unit = [](int64_t in, int64_t b, bool projection) {
    const int64_t out = 4 * b;
    int64_t p = 2 * in + in * b + 2 * b + 9 * b * b + 2 * b + b * out;
    if (projection) p += in * out;
    return p;
  };
  int64_t p = 3 * 16 * 9;
  int64_t in = 16;
  for (int64_t b : {16, 32, 64}) {
    p += unit(in, b, true) + (n - 1) * unit(4 * b, b, false);
    in = 4 * b;
  }
  p += 2 * 256 + 256 * classes + classes;
  return static_cast<uint64_t>(p);
}

// --- Parameters ----------------------------------------------------------------------------------

struct Reference {
  const char* model;
  uint64_t params;
  double gmacs;  // 0 where none is published
};

// torchvision model cards (acc. "num_params" and "GFLOPS"); timm's card for Inception-v4 (42.7M
// params, 12.3 GMACs; the exact count 42,679,816 is timm's for num_classes=1000).
constexpr Reference kPublished[] = {
    {"vgg16", 138357544, 15.47},      {"vgg19", 143667240, 19.63},       {"resnet18", 11689512, 1.81},
    {"resnet34", 21797672, 3.66},     {"resnet50", 25557032, 4.09},      {"resnet101", 44549160, 7.80},
    {"resnet152", 60192808, 11.51},   {"densenet121", 7978856, 2.83},    {"densenet169", 14149480, 3.36},
    {"densenet201", 20013928, 4.29},  {"inception-v4", 42679816, 12.3},
};

TEST(ZooCnn, ParamsEqualPublishedCounts) {
  for (const Reference& r : kPublished) {
    SCOPED_TRACE(r.model);
    EXPECT_EQ(default_graph(r.model).param_count(), r.params);
  }
}

TEST(ZooCnn, RegistryCarriesThePublishedReferences) {
  for (const Reference& r : kPublished) {
    SCOPED_TRACE(r.model);
    const ModelEntry* e = find_model(r.model);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->family, ModelFamily::kCnn);
    EXPECT_EQ(e->reference_params, r.params);
    EXPECT_DOUBLE_EQ(e->reference_gmacs, r.gmacs);
    EXPECT_FALSE(e->reference.empty());
  }
}

TEST(ZooCnn, DenseNetFormulaReproducesTorchvision) {
  // Validates the closed form before it is trusted for DenseNet-264 and the mini model.
  EXPECT_EQ(densenet_params({6, 12, 24, 16}, 32, 64, true, 1000), 7978856u);
  EXPECT_EQ(densenet_params({6, 12, 32, 32}, 32, 64, true, 1000), 14149480u);
  EXPECT_EQ(densenet_params({6, 12, 48, 32}, 32, 64, true, 1000), 20013928u);
}

TEST(ZooCnn, DenseNetParamsMatchClosedForm) {
  EXPECT_EQ(default_graph("densenet264").param_count(), densenet_params({6, 12, 64, 48}, 32, 64, true, 1000));
  EXPECT_EQ(default_graph("densenet-mini").param_count(), densenet_params({2, 2}, 12, 24, false, 10));
}

TEST(ZooCnn, PreactResNetParamsMatchClosedForm) {
  EXPECT_EQ(default_graph("resnet-mini").param_count(), preact_params(1, 10));
  EXPECT_EQ(default_graph("preact-resnet164").param_count(), preact_params(18, 10));
  EXPECT_EQ(default_graph("preact-resnet1001").param_count(), preact_params(111, 10));
  // The paper's 1.7M and 10.2M, to its rounding (it counts conv and linear weights only; the batch-norm
  // affine parameters add 0.024M and 0.149M).
  EXPECT_NEAR(static_cast<double>(preact_params(18, 10)) / 1e6, 1.7, 0.05);
  EXPECT_NEAR(static_cast<double>(preact_params(111, 10)) / 1e6, 10.2, 0.15);
}

TEST(ZooCnn, ClassifierFollowsNumClasses) {
  // Only the last linear layer depends on the class count: (in + 1) parameters per class.
  const struct {
    const char* model;
    uint64_t fc_in;
  } cases[] = {{"resnet18", 512}, {"resnet50", 2048}, {"densenet121", 1024}, {"vgg16", 4096}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.model);
    Result<Graph> g = build_model(c.model, config(1, 0, 10));
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_EQ(g->param_count(), default_graph(c.model).param_count() - 990 * (c.fc_in + 1));
    const Tensor& loss_input = g->tensor(g->ops[static_cast<size_t>(find_op(*g, "loss")->id)].inputs[0]);
    EXPECT_EQ(loss_input.shape, (std::vector<int64_t>{1, 10}));
  }
}

// --- Compute -------------------------------------------------------------------------------------

TEST(ZooCnn, ForwardMacsWithinTwoPercentOfPublished) {
  for (const Reference& r : kPublished) {
    SCOPED_TRACE(r.model);
    const double gmacs = static_cast<double>(default_graph(r.model).forward_macs()) / 1e9;
    EXPECT_NEAR(gmacs, r.gmacs, 0.02 * r.gmacs);
  }
}

TEST(ZooCnn, MacsScaleLinearlyWithBatchAndParamsDoNot) {
  for (const char* model : {"vgg16", "resnet18", "resnet50", "densenet121", "inception-v4", "resnet-mini",
                            "preact-resnet164", "densenet-mini"}) {
    SCOPED_TRACE(model);
    const Graph& one = default_graph(model);
    Result<Graph> three = build_model(model, config(3));
    ASSERT_TRUE(three.ok()) << three.status().message();
    ASSERT_GT(one.forward_macs(), 0u);
    EXPECT_EQ(three->forward_macs(), 3 * one.forward_macs());
    EXPECT_EQ(three->param_count(), one.param_count());
    EXPECT_EQ(three->ops.size(), one.ops.size());
    EXPECT_EQ(three->info.batch, 3);
  }
}

// --- Input sizes and arguments -------------------------------------------------------------------

void expect_too_small(const std::string& model, int64_t image, const std::string& layer) {
  Result<Graph> g = build_model(model, config(1, image));
  ASSERT_FALSE(g.ok()) << model << " at " << image;
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  const std::string& msg = g.status().message();
  EXPECT_NE(msg.find("too small"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(image)), std::string::npos) << msg;
  EXPECT_NE(msg.find(layer), std::string::npos) << msg;
  EXPECT_NE(msg.find(model), std::string::npos) << msg;
}

void expect_builds(const std::string& model, int64_t image) {
  Result<Graph> g = build_model(model, config(1, image));
  ASSERT_TRUE(g.ok()) << model << " at " << image << ": " << g.status().message();
  EXPECT_EQ(g->info.image, image);
}

TEST(ZooCnn, DenseNetSmallestImage) {
  // conv0 /2 (ceil), pool0 /2 (ceil), then three unpadded 2x2 average pools: 29 -> 15 -> 8 -> 4 -> 2 -> 1,
  // while 28 -> 14 -> 7 -> 3 -> 1 -> 0 at the third transition.
  expect_builds("densenet121", 29);
  expect_too_small("densenet121", 28, "features.transition3.pool");
  expect_too_small("densenet264", 16, "features.transition3.pool");
  // The mini model has one transition and no downsampling stem.
  expect_builds("densenet-mini", 2);
  expect_too_small("densenet-mini", 1, "features.transition1.pool");
}

TEST(ZooCnn, InceptionSmallestImage) {
  // Unpadded 3x3 windows: 75 -> 37 -> 35 -> 35 -> 17 -> 15 -> 7 -> 3 -> 1 (stem, mixed 3a/4a/5a,
  // reductions A and B); 74 leaves 2x2 at reduction B, too small for its 3x3 windows.
  expect_builds("inception-v4", 75);
  expect_too_small("inception-v4", 74, "features.18.");
}

TEST(ZooCnn, VggImageRules) {
  expect_too_small("vgg16", 16, "features.");
  // 100/32 = 3: torchvision's adaptive 7x7 pool would need overlapping bins; rejected.
  Result<Graph> odd = build_model("vgg16", config(1, 100));
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("multiple of 7"), std::string::npos) << odd.status().message();
  // 255 still ends at 7x7 (no pool); 448 ends at 14x14 and pools 2x2 to 7x7. Parameters are the same.
  for (int64_t image : {255, 448}) {
    Result<Graph> g = build_model("vgg16", config(1, image));
    ASSERT_TRUE(g.ok()) << image << ": " << g.status().message();
    EXPECT_EQ(g->param_count(), 138357544u);
    EXPECT_EQ(find_op(*g, "avgpool") != nullptr, image == 448);
  }
  EXPECT_EQ(find_op(default_graph("vgg16"), "avgpool"), nullptr);
}

TEST(ZooCnn, ResNetsAcceptTinyImagesLikeTheirReferences) {
  // Every window is padded or 1x1, so even a 1x1 image keeps 1x1 maps (as in torchvision).
  for (const char* model : {"resnet50", "resnet-mini"}) {
    SCOPED_TRACE(model);
    Result<Graph> g = build_model(model, config(2, 1));
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_EQ(g->param_count(), default_graph(model).param_count());
  }
}

TEST(ZooCnn, BadArgumentsAreInvalidArgument) {
  for (int64_t batch : {0, -1, -64}) {
    Result<Graph> g = build_model("resnet18", config(batch));
    ASSERT_FALSE(g.ok()) << batch;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(std::to_string(batch)), std::string::npos) << g.status().message();
  }
  Result<Graph> neg_image = build_model("densenet121", config(1, -5));
  EXPECT_EQ(neg_image.status().code(), StatusCode::kInvalidArgument);
  ModelConfig with_seq = config(1);
  with_seq.seq = 128;
  Result<Graph> seq = build_model("resnet18", with_seq);
  EXPECT_EQ(seq.status().code(), StatusCode::kInvalidArgument);

  // Direct calls: depths the families do not have, and unfilled configs.
  const ModelConfig ok = config(1, 32, 10);
  EXPECT_EQ(build_resnet(20, ok).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(build_vgg(11, ok).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(build_densenet(161, ok).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(build_preact_resnet(164 + 1, ok).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(build_preact_resnet(2, ok).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(build_preact_resnet(20, ok).ok());  // 9*2 + 2
  EXPECT_EQ(build_resnet(18, config(1, 32)).status().code(),
            StatusCode::kInvalidArgument);  // num_classes 0
  EXPECT_EQ(build_densenet(0, config(0, 32, 10)).status().code(),
            StatusCode::kInvalidArgument);
}

// --- Structure the references fix ----------------------------------------------------------------

TEST(ZooCnn, ResNetV15StridesOnTheThreeByThree) {
  const Graph& g = default_graph("resnet50");
  const Op* conv1 = find_op(g, "layer2.0.conv1");
  const Op* conv2 = find_op(g, "layer2.0.conv2");
  const Op* down = find_op(g, "layer2.0.downsample.0");
  ASSERT_TRUE(conv1 && conv2 && down);
  EXPECT_EQ(conv1->attrs.stride_h, 1);
  EXPECT_EQ(conv2->attrs.stride_h, 2);
  EXPECT_EQ(down->attrs.stride_h, 2);
  // 224 -> 112 (conv1) -> 56 (max pool) -> 56, 28, 14, 7 per stage.
  const Tensor* last = find_tensor(g, "layer4.2.relu");
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->shape, (std::vector<int64_t>{1, 2048, 7, 7}));
  // Basic blocks need no projection in layer1 (64 -> 64), bottlenecks do (64 -> 256).
  EXPECT_EQ(find_tensor(default_graph("resnet18"), "layer1.0.downsample.0.weight"), nullptr);
  EXPECT_NE(find_tensor(default_graph("resnet18"), "layer2.0.downsample.0.weight"), nullptr);
  EXPECT_NE(find_tensor(g, "layer1.0.downsample.0.weight"), nullptr);
}

TEST(ZooCnn, BiasesAndBatchNormEpsFollowTheReferences) {
  EXPECT_NE(find_tensor(default_graph("vgg16"), "features.0.bias"), nullptr);
  EXPECT_NE(find_tensor(default_graph("vgg16"), "classifier.6.bias"), nullptr);
  EXPECT_EQ(find_tensor(default_graph("resnet50"), "conv1.bias"), nullptr);
  EXPECT_NE(find_tensor(default_graph("resnet50"), "fc.bias"), nullptr);
  EXPECT_EQ(find_tensor(default_graph("densenet121"), "features.conv0.bias"), nullptr);
  EXPECT_EQ(find_tensor(default_graph("inception-v4"), "features.0.conv.bias"), nullptr);
  for (const char* model : {"resnet50", "densenet121", "inception-v4", "preact-resnet164"}) {
    SCOPED_TRACE(model);
    const float want = std::string(model) == "inception-v4" ? 1e-3f : 1e-5f;
    const Graph& g = default_graph(model);
    int bns = 0;
    for (const Op& op : g.ops) {
      if (op.phase != Phase::kForward || op.type != OpType::kBatchNorm) continue;
      ++bns;
      EXPECT_FLOAT_EQ(op.attrs.eps, want) << op.name;
    }
    EXPECT_GT(bns, 0);
  }
  // VGG (no batch-norm variant) has none; its classifier has two dropouts.
  EXPECT_EQ(count_forward(default_graph("vgg16"), OpType::kBatchNorm), 0);
  EXPECT_EQ(count_forward(default_graph("vgg16"), OpType::kDropout), 2);
}

TEST(ZooCnn, DenseNetConcatenatesAllEarlierFeatures) {
  // Per block of L layers: layers 2..L each concatenate all earlier maps, plus one concat at the end.
  const struct {
    const char* model;
    std::vector<int> blocks;
  } cases[] = {{"densenet121", {6, 12, 24, 16}}, {"densenet264", {6, 12, 64, 48}}, {"densenet-mini", {2, 2}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.model);
    int want = 0;
    for (int l : c.blocks) want += l;
    EXPECT_EQ(count_forward(default_graph(c.model), OpType::kConcat), want);
  }
  const Graph& g = default_graph("densenet121");
  const Op* cat = find_op(g, "features.denseblock3.denselayer24.cat");
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(cat->inputs.size(), 24u);  // block input + 23 earlier layers
  EXPECT_EQ(g.tensor(cat->outputs[0]).shape, (std::vector<int64_t>{1, 256 + 23 * 32, 14, 14}));
  const Tensor* norm5 = find_tensor(g, "features.norm5");
  ASSERT_NE(norm5, nullptr);
  EXPECT_EQ(norm5->shape, (std::vector<int64_t>{1, 1024, 7, 7}));
}

TEST(ZooCnn, InceptionV4Shapes) {
  const Graph& g = default_graph("inception-v4");
  // Stage outputs of timm's feature_info: 64@147, 160@73, 384@35, 1024@17, 1536@8.
  const struct {
    const char* tensor;
    std::vector<int64_t> shape;
  } cases[] = {{"features.2.relu", {1, 64, 147, 147}}, {"features.3.cat", {1, 160, 73, 73}},
               {"features.9.cat", {1, 384, 35, 35}},   {"features.17.cat", {1, 1024, 17, 17}},
               {"features.21.cat", {1, 1536, 8, 8}}};
  for (const auto& c : cases) {
    const Tensor* t = find_tensor(g, c.tensor);
    ASSERT_NE(t, nullptr) << c.tensor;
    EXPECT_EQ(t->shape, c.shape) << c.tensor;
  }
  const Op* pool = find_op(g, "features.6.branch3.0");
  ASSERT_NE(pool, nullptr);
  EXPECT_FALSE(pool->attrs.count_include_pad);
}

TEST(ZooCnn, PreactResNetLayout) {
  const Graph& g = default_graph("preact-resnet164");
  // 32 -> 32, 16, 8 with 64, 128, 256 channels; 18 units per stage, one projection per stage.
  const Tensor* last = find_tensor(g, "layer3.17.add");
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->shape, (std::vector<int64_t>{1, 256, 8, 8}));
  EXPECT_EQ(count_forward(g, OpType::kAdd), 3 * 18);
  EXPECT_EQ(count_forward(g, OpType::kConv2d), 1 + 3 * 18 * 3 + 3);
  // The projection reads the unit's pre-activated input, strided like the first 1x1 conv.
  const Op* shortcut = find_op(g, "layer2.0.shortcut");
  const Op* conv1 = find_op(g, "layer2.0.conv1");
  ASSERT_TRUE(shortcut && conv1);
  EXPECT_EQ(shortcut->inputs[0], conv1->inputs[0]);
  EXPECT_EQ(shortcut->attrs.stride_h, 2);
  EXPECT_EQ(conv1->attrs.stride_h, 2);
}

TEST(ZooCnn, EveryCnnIsAValidTrainingGraphWithUniqueOpNames) {
  for (const ModelEntry& e : model_zoo()) {
    if (e.family != ModelFamily::kCnn) continue;
    SCOPED_TRACE(e.name);
    const Graph& g = default_graph(e.name);
    EXPECT_TRUE(g.validate().ok());
    EXPECT_NE(g.loss, kNoTensor);
    EXPECT_EQ(g.info.model, e.default_depth > 0 ? e.name + std::to_string(e.default_depth) : e.name);
    EXPECT_EQ(g.info.num_classes, e.default_classes);
    std::set<std::string> names;
    for (const Op& op : g.ops) {
      if (op.phase != Phase::kForward) continue;
      EXPECT_TRUE(names.insert(op.name).second) << "duplicate op " << op.name;
    }
  }
}

}  // namespace
}  // namespace ferry
