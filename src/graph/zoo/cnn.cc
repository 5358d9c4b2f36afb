// CNN half of the model zoo: VGG, ResNet, pre-activation ResNet, DenseNet and Inception-v4, written
// layer for layer after their reference implementations in training mode.
//
// Design
// - One training iteration at batch N and image side S: an f32 image [N,3,S,S] and int32 labels [N]
//   in, mean cross-entropy of the logits [N,classes] out (config.num_classes; the zoo fills in 1000
//   for the ImageNet models and 10 for the CIFAR ones).
// - References: torchvision for VGG (no batch norm), ResNet and DenseNet; Kaiming He's
//   resnet-1k-layers code (resnet-pre-act.lua) for the pre-activation ResNets of "Identity Mappings
//   in Deep Residual Networks" (He et al., 2016); timm's inception_v4 for Inception-v4. Layer names
//   are the references' module paths (`layer3.4.conv2`, `features.denseblock2.denselayer7.norm1`,
//   `features.17.branch1.2.conv`), so weight names equal the references' state_dict keys and
//   parameter counts equal theirs exactly (see the tests).
// - Biases as in the references: VGG convs and every classifier have one; ResNet, DenseNet and
//   Inception convs have none (a batch norm follows). Batch-norm running statistics are buffers,
//   not parameters, as in PyTorch.
// - Concatenations are materialised where the references materialise them, because those copies
//   are memory a planner must see: every DenseNet layer concatenates all earlier feature maps of its
//   block (torchvision's default memory_efficient=False) and each block ends with one more concat;
//   Inception modules concatenate their branches, Inception-C also its two nested pairs.
// - Residual adds take the branch as their first operand: it dies at the add, so the add may write
//   over it in place, while the identity input may still be needed elsewhere.
//
// Input sizes. Every windowed op (conv, pool) goes through Net, which computes the output side
// before the builder sees the op; the first layer whose output would be empty fails the build with
// InvalidArgument naming the image side and that layer. Which models can fail:
// - ResNet and pre-activation ResNet accept any side >= 1, like their references: all their
//   windows are padded (k=3 p=1, k=7 p=3) or 1x1, so no output side ever reaches 0.
// - DenseNet needs S >= 29 (three stride-2 unpadded 2x2 average pools after a /4 stem); the mini
//   model S >= 2.
// - Inception-v4 needs S >= 75 (its unpadded stride-2 3x3 windows).
// - VGG needs S >= 32 (five 2x2 max pools). See Note [VGG adaptive pool] for its further rule.
//
// Note [VGG adaptive pool]
//   torchvision ends VGG's features with AdaptiveAvgPool2d((7, 7)) so that the classifier always
//   sees 512x7x7 = 25088 inputs. At 224 (and up to 255) the last feature map already is 7x7 and the
//   pool is the identity, so no op is emitted. When the map side m = S/32 is a multiple of 7, the
//   adaptive pool's bins are exactly an ordinary average pool with kernel = stride = m/7, which is
//   emitted. Any other m would need overlapping bins of varying size (or upsampling when m < 7),
//   which the IR has no op for; rather than change the parameter count or approximate the
//   compute, such sizes are rejected with InvalidArgument naming the sides that work.
#include <array>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "graph/builder.h"
#include "graph/zoo/zoo.h"

namespace ferry {

namespace {

constexpr float kTorchBnEps = 1e-5f;      // nn.BatchNorm2d default (torchvision, resnet-1k-layers)
constexpr float kInceptionBnEps = 1e-3f;  // timm inception_v4 norm_eps (TensorFlow's value)

// Output side of a window over `in` (floor mode, as PyTorch); 0 when the window does not fit.
int64_t window_out(int64_t in, int kernel, int stride, int pad) {
  if (in + 2 * pad < kernel) return 0;
  return (in + 2 * pad - kernel) / stride + 1;
}

// A GraphBuilder for image classifiers: creates the image and label inputs, checks every windowed
// op against the current feature-map size so an image that is too small is reported by layer, and
// adds the loss at the end. Once an error is recorded every later call is a no-op returning
// kNoTensor (the builder treats kNoTensor inputs the same way).
class Net {
 public:
  Net(const std::string& model, const ModelConfig& config)
      : b_(GraphInfo{.model = model,
                     .batch = config.batch,
                     .image = config.image,
                     .num_classes = config.num_classes,
                     .optimizer = config.train.optimizer,
                     .precision = config.precision}),
        config_(config) {
    if (config.batch <= 0 || config.image <= 0 || config.num_classes <= 0) {
      status_ = Status::InvalidArgument(
          fmt::format("batch, image side and classes must be positive, got batch {}, image {}, classes {}",
                      config.batch, config.image, config.num_classes));
      return;
    }
    image_ = b_.input("image", {config.batch, 3, config.image, config.image});
    labels_ = b_.labels("label", {config.batch});
  }

  TensorId image() const { return image_; }
  int64_t num_classes() const { return config_.num_classes; }
  bool ok() const { return status_.ok() && !b_.failed(); }
  // Spatial side (height) of a feature map, or 0 after an error.
  int64_t side(TensorId x) const { return ok() ? b_.shape(x)[2] : 0; }

  TensorId conv(const std::string& name, TensorId x, int64_t out, int kernel, int stride = 1, int pad = 0,
                bool bias = false) {
    if (!fits(name, x, kernel, kernel, stride, pad, pad)) return kNoTensor;
    return b_.conv2d(name, x, out, kernel, stride, pad, bias);
  }
  TensorId conv_rect(const std::string& name, TensorId x, int64_t out, int kernel_h, int kernel_w, int stride,
                     int pad_h, int pad_w) {
    if (!fits(name, x, kernel_h, kernel_w, stride, pad_h, pad_w)) return kNoTensor;
    return b_.conv2d_rect(name, x, out, kernel_h, kernel_w, stride, pad_h, pad_w);
  }
  TensorId max_pool(const std::string& name, TensorId x, int kernel, int stride, int pad = 0) {
    if (!fits(name, x, kernel, kernel, stride, pad, pad)) return kNoTensor;
    return b_.max_pool(name, x, kernel, stride, pad);
  }
  TensorId avg_pool(const std::string& name, TensorId x, int kernel, int stride, int pad = 0,
                    bool count_include_pad = true) {
    if (!fits(name, x, kernel, kernel, stride, pad, pad)) return kNoTensor;
    return b_.avg_pool(name, x, kernel, stride, pad, count_include_pad);
  }
  TensorId bn(const std::string& name, TensorId x, float eps = kTorchBnEps) { return b_.batch_norm(name, x, eps); }
  TensorId relu(const std::string& name, TensorId x) { return b_.relu(name, x); }
  TensorId global_avg_pool(const std::string& name, TensorId x) { return b_.global_avg_pool(name, x); }
  TensorId linear(const std::string& name, TensorId x, int64_t out) { return b_.linear(name, x, out, true); }
  TensorId dropout(const std::string& name, TensorId x, float p) { return b_.dropout(name, x, p); }
  TensorId concat(const std::string& name, const std::vector<TensorId>& xs) { return b_.concat(name, xs, 1); }
  TensorId add(const std::string& name, TensorId branch, TensorId identity) { return b_.add(name, branch, identity); }

  // Records a user error found by a model's own rule (VGG's size rule); the first error wins.
  void fail(Status status) {
    if (status_.ok()) status_ = std::move(status);
  }

  // Adds the loss on `logits` and derives the training graph; the first recorded error otherwise.
  Result<Graph> finish(TensorId logits) && {
    if (!status_.ok()) return status_;
    b_.cross_entropy("loss", logits, labels_);
    return std::move(b_).finish(config_.train);
  }

 private:
  // True when a kernel_h x kernel_w window leaves a non-empty output on x; otherwise records why.
  bool fits(const std::string& name, TensorId x, int kernel_h, int kernel_w, int stride, int pad_h, int pad_w) {
    if (!ok()) return false;
    FERRY_CHECK(x != kNoTensor, "{} reads no tensor although no error was recorded", name);
    const std::vector<int64_t>& s = b_.shape(x);
    FERRY_CHECK(s.size() == 4, "{} expects an NCHW feature map", name);
    const int64_t oh = window_out(s[2], kernel_h, stride, pad_h);
    const int64_t ow = window_out(s[3], kernel_w, stride, pad_w);
    if (oh > 0 && ow > 0) return true;
    status_ = Status::InvalidArgument(fmt::format(
        "image {}x{} is too small: {} would have {}x{} outputs (its input is {}x{}; window {}x{}, stride {}, "
        "padding {}x{})",
        config_.image, config_.image, name, oh, ow, s[2], s[3], kernel_h, kernel_w, stride, pad_h, pad_w));
    return false;
  }

  GraphBuilder b_;
  ModelConfig config_;
  Status status_;
  TensorId image_ = kNoTensor;
  TensorId labels_ = kNoTensor;
};

Status unknown_depth(const char* family, int depth, const char* known) {
  return Status::InvalidArgument(fmt::format("no {} of depth {} (known depths: {})", family, depth, known));
}

// ------------------------------------------------------------------------------------------------
// VGG (torchvision vgg16 / vgg19, configurations D and E of Simonyan & Zisserman, no batch norm)

constexpr int kPool = 0;  // max pool marker in a VGG configuration
constexpr std::array<int, 18> kVgg16 = {64, 64, kPool, 128, 128, kPool, 256, 256, 256, kPool,
                                        512, 512, 512, kPool, 512, 512, 512, kPool};
constexpr std::array<int, 21> kVgg19 = {64,  64,  kPool, 128, 128, kPool, 256, 256, 256, 256, kPool,
                                        512, 512, 512,   512, kPool, 512, 512, 512, 512, kPool};

}  // namespace

Result<Graph> build_vgg(int depth, const ModelConfig& config) {
  std::vector<int> layers;
  if (depth == 16) layers.assign(kVgg16.begin(), kVgg16.end());
  else if (depth == 19) layers.assign(kVgg19.begin(), kVgg19.end());
  else return unknown_depth("VGG", depth, "16, 19");

  Net net(fmt::format("vgg{}", depth), config);
  TensorId x = net.image();
  // Names are torchvision's nn.Sequential indices: a conv and its ReLU take two, a pool one.
  int index = 0;
  for (int channels : layers) {
    if (channels == kPool) {
      x = net.max_pool(fmt::format("features.{}", index++), x, 2, 2);
      continue;
    }
    x = net.conv(fmt::format("features.{}", index), x, channels, 3, 1, 1, /*bias=*/true);
    x = net.relu(fmt::format("features.{}", index + 1), x);
    index += 2;
  }
  // Note [VGG adaptive pool].
  constexpr int64_t kPoolSide = 7;
  const int64_t side = net.side(x);
  if (net.ok() && side != kPoolSide) {
    if (side % kPoolSide != 0) {
      net.fail(Status::InvalidArgument(fmt::format(
          "image {} leaves a last feature map of {}x{}, but torchvision's adaptive 7x7 average pool is "
          "expressible only when that side (image/32) is a multiple of 7: use an image side of 224..255, "
          "448..479, 672..703, ...",
          config.image, side, side)));
    } else {
      const int window = static_cast<int>(side / kPoolSide);
      x = net.avg_pool("avgpool", x, window, window);
    }
  }
  x = net.relu("classifier.1", net.linear("classifier.0", x, 4096));  // flattens 512x7x7
  x = net.dropout("classifier.2", x, 0.5f);
  x = net.relu("classifier.4", net.linear("classifier.3", x, 4096));
  x = net.dropout("classifier.5", x, 0.5f);
  return std::move(net).finish(net.linear("classifier.6", x, net.num_classes()));
}

// ------------------------------------------------------------------------------------------------
// ResNet (torchvision resnet18..152; v1.5: a bottleneck strides on its 3x3 conv, not its first 1x1)

namespace {

struct ResNetSpec {
  int depth;
  std::array<int, 4> blocks;  // residual blocks per stage
  bool bottleneck;            // 1x1-3x3-1x1 with 4x expansion, or two 3x3 (basic block)
};
constexpr std::array<ResNetSpec, 5> kResNets = {{
    {18, {2, 2, 2, 2}, false},
    {34, {3, 4, 6, 3}, false},
    {50, {3, 4, 6, 3}, true},
    {101, {3, 4, 23, 3}, true},
    {152, {3, 8, 36, 3}, true},
}};

}  // namespace

Result<Graph> build_resnet(int depth, const ModelConfig& config) {
  const ResNetSpec* spec = nullptr;
  for (const ResNetSpec& s : kResNets)
    if (s.depth == depth) spec = &s;
  if (spec == nullptr) return unknown_depth("ResNet", depth, "18, 34, 50, 101, 152");
  const bool bottleneck = spec->bottleneck;
  const int64_t expansion = bottleneck ? 4 : 1;

  Net net(fmt::format("resnet{}", depth), config);
  TensorId x = net.conv("conv1", net.image(), 64, 7, 2, 3);
  x = net.relu("relu", net.bn("bn1", x));
  x = net.max_pool("maxpool", x, 3, 2, 1);
  int64_t in_channels = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = int64_t{64} << stage;
    const int64_t out_channels = planes * expansion;
    for (int block = 0; block < spec->blocks[static_cast<size_t>(stage)]; ++block) {
      const std::string p = fmt::format("layer{}.{}.", stage + 1, block);
      const int stride = (stage > 0 && block == 0) ? 2 : 1;
      TensorId y;
      if (bottleneck) {
        y = net.relu(p + "relu1", net.bn(p + "bn1", net.conv(p + "conv1", x, planes, 1)));
        y = net.relu(p + "relu2", net.bn(p + "bn2", net.conv(p + "conv2", y, planes, 3, stride, 1)));
        y = net.bn(p + "bn3", net.conv(p + "conv3", y, out_channels, 1));
      } else {
        y = net.relu(p + "relu1", net.bn(p + "bn1", net.conv(p + "conv1", x, planes, 3, stride, 1)));
        y = net.bn(p + "bn2", net.conv(p + "conv2", y, planes, 3, 1, 1));
      }
      TensorId identity = x;
      if (stride != 1 || in_channels != out_channels)
        identity = net.bn(p + "downsample.1", net.conv(p + "downsample.0", x, out_channels, 1, stride));
      x = net.relu(p + "relu", net.add(p + "add", y, identity));
      in_channels = out_channels;
    }
  }
  x = net.global_avg_pool("avgpool", x);  // AdaptiveAvgPool2d((1, 1))
  TensorId logits = net.linear("fc", x, net.num_classes());
  return std::move(net).finish(logits);
}

// ------------------------------------------------------------------------------------------------
// Pre-activation ResNet for CIFAR with bottleneck units (He et al. 2016, "Identity Mappings in Deep
// Residual Networks", Table 2/3: ResNet-164 and ResNet-1001; code: resnet-1k-layers).
//
// depth = 9n + 2: a 3x3 conv (3 -> 16), three stages of n bottleneck units with outputs 64, 128,
// 256 (bottleneck widths 16, 32, 64; stages 2 and 3 stride 2 on the unit's first 1x1 conv, as in
// the Lua code), then BN-ReLU, global average pool (the 8x8 average pool at 32x32) and a linear
// layer. Each unit is BN-ReLU-conv1x1, BN-ReLU-conv3x3, BN-ReLU-conv1x1 plus a shortcut; the first
// unit of each stage changes the width, so its shortcut is a 1x1 projection conv that reads the
// unit's pre-activated input (the BN-ReLU is shared by both paths), the others are identities.
//
// Parameter counts (no conv biases; see below), with b the bottleneck width and o = 4b:
//   identity unit:   2o (BN) + o*b + 2b + 9b^2 + 2b + b*o      = 17b^2 + 12b
//   projection unit: 2i + i*b + 2b + 9b^2 + 2b + b*o + i*o      (i = input width)
//   stem 3*16*9 = 432; head 2*256 + 256*classes + classes.
// Stage 1 (b=16, i=16): 4704 + (n-1)*4544; stage 2 (b=32, i=64): 23808 + (n-1)*17792;
// stage 3 (b=64, i=128): 94720 + (n-1)*70400. With 10 classes:
//   ResNet-11   (n=1):    126,746
//   ResNet-164  (n=18):  1,703,258   (paper: 1.7M)
//   ResNet-1001 (n=111): 10,327,706  (paper: 10.2M)
// The paper's figures count the conv and linear weights only: 1,679,034 and 10,178,490. The Lua
// code's convs also carry biases (nn.SpatialConvolution's default), which add 12,560 / 75,056;
// they are left out here, as in the common PyTorch ports, because a batch norm or an add of
// normalised values follows each of them and their memory and compute are negligible.

Result<Graph> build_preact_resnet(int depth, const ModelConfig& config) {
  if (depth < 11 || (depth - 2) % 9 != 0)
    return Status::InvalidArgument(
        fmt::format("pre-activation ResNet depth must be 9n+2 with n >= 1 (11, 164, 1001, ...), got {}", depth));
  const int units = (depth - 2) / 9;

  Net net(fmt::format("preact-resnet{}", depth), config);
  TensorId x = net.conv("conv1", net.image(), 16, 3, 1, 1);
  int64_t in_channels = 16;
  for (int stage = 0; stage < 3; ++stage) {
    const int64_t out_channels = int64_t{64} << stage;
    const int64_t width = out_channels / 4;
    for (int unit = 0; unit < units; ++unit) {
      const std::string p = fmt::format("layer{}.{}.", stage + 1, unit);
      const int stride = (stage > 0 && unit == 0) ? 2 : 1;
      TensorId act = net.relu(p + "relu1", net.bn(p + "bn1", x));
      TensorId y = net.conv(p + "conv1", act, width, 1, stride);
      y = net.conv(p + "conv2", net.relu(p + "relu2", net.bn(p + "bn2", y)), width, 3, 1, 1);
      y = net.conv(p + "conv3", net.relu(p + "relu3", net.bn(p + "bn3", y)), out_channels, 1);
      TensorId shortcut = x;
      if (in_channels != out_channels) shortcut = net.conv(p + "shortcut", act, out_channels, 1, stride);
      x = net.add(p + "add", y, shortcut);
      in_channels = out_channels;
    }
  }
  x = net.relu("relu", net.bn("bn", x));
  x = net.global_avg_pool("avgpool", x);
  TensorId logits = net.linear("fc", x, net.num_classes());
  return std::move(net).finish(logits);
}

// ------------------------------------------------------------------------------------------------
// DenseNet-BC (torchvision densenet121/169/201; DenseNet-264 from Huang et al. 2017, Table 1, with
// torchvision's k=32 layout; and a small CIFAR variant for tests)

namespace {

constexpr int64_t kBnSize = 4;  // bottleneck: the 1x1 conv outputs kBnSize * growth channels

struct DenseNetSpec {
  std::vector<int> block_layers;
  int64_t growth;
  int64_t init_features;
  bool imagenet_stem;  // conv 7x7/2 + BN-ReLU + max pool 3x3/2, or a single conv 3x3 (CIFAR)
};

}  // namespace

Result<Graph> build_densenet(int depth, const ModelConfig& config) {
  DenseNetSpec spec;
  switch (depth) {
    case 121: spec = {{6, 12, 24, 16}, 32, 64, true}; break;
    case 169: spec = {{6, 12, 32, 32}, 32, 64, true}; break;
    case 201: spec = {{6, 12, 48, 32}, 32, 64, true}; break;
    case 264: spec = {{6, 12, 64, 48}, 32, 64, true}; break;
    // densenet-mini: DenseNet-BC for CIFAR (stem of 2k channels) cut to 2 blocks of 2 layers.
    case 0: spec = {{2, 2}, 12, 24, false}; break;
    default: return unknown_depth("DenseNet", depth, "121, 169, 201, 264, and 0 for the mini model");
  }

  Net net(depth == 0 ? std::string("densenet-mini") : fmt::format("densenet{}", depth), config);
  TensorId x;
  if (spec.imagenet_stem) {
    x = net.conv("features.conv0", net.image(), spec.init_features, 7, 2, 3);
    x = net.relu("features.relu0", net.bn("features.norm0", x));
    x = net.max_pool("features.pool0", x, 3, 2, 1);
  } else {
    x = net.conv("features.conv0", net.image(), spec.init_features, 3, 1, 1);
  }
  int64_t channels = spec.init_features;
  for (size_t block = 0; block < spec.block_layers.size(); ++block) {
    const std::string bp = fmt::format("features.denseblock{}.", block + 1);
    std::vector<TensorId> features = {x};
    for (int layer = 0; layer < spec.block_layers[block]; ++layer) {
      const std::string p = fmt::format("{}denselayer{}.", bp, layer + 1);
      // torchvision concatenates all earlier maps anew in every layer; the first layer's "concat"
      // of a single map is a plain read here.
      TensorId in = features.size() == 1 ? features[0] : net.concat(p + "cat", features);
      TensorId y = net.conv(p + "conv1", net.relu(p + "relu1", net.bn(p + "norm1", in)), kBnSize * spec.growth, 1);
      y = net.conv(p + "conv2", net.relu(p + "relu2", net.bn(p + "norm2", y)), spec.growth, 3, 1, 1);
      features.push_back(y);
    }
    x = net.concat(bp + "cat", features);
    channels += spec.block_layers[block] * spec.growth;
    if (block + 1 < spec.block_layers.size()) {
      const std::string tp = fmt::format("features.transition{}.", block + 1);
      channels /= 2;  // compression 0.5
      x = net.conv(tp + "conv", net.relu(tp + "relu", net.bn(tp + "norm", x)), channels, 1);
      x = net.avg_pool(tp + "pool", x, 2, 2);
    }
  }
  x = net.relu("relu", net.bn("features.norm5", x));
  x = net.global_avg_pool("avgpool", x);  // adaptive_avg_pool2d(1)
  TensorId logits = net.linear("classifier", x, net.num_classes());
  return std::move(net).finish(logits);
}

// ------------------------------------------------------------------------------------------------
// Inception-v4 (Szegedy et al. 2016; timm inception_v4: 299x299, conv-BN(eps 1e-3)-ReLU units
// without conv bias, no dropout before the classifier at timm's default drop_rate 0)

namespace {

// timm's ConvNormAct: `name.conv`, `name.bn`, `name.relu`, for a square window.
TensorId conv_unit(Net& net, const std::string& name, TensorId x, int64_t out, int kernel, int stride = 1,
                   int pad = 0) {
  TensorId y = net.conv(name + ".conv", x, out, kernel, stride, pad);
  return net.relu(name + ".relu", net.bn(name + ".bn", y, kInceptionBnEps));
}
// The same for the factorised 1xn / nx1 windows (always stride 1, "same" padding).
TensorId conv_unit_rect(Net& net, const std::string& name, TensorId x, int64_t out, int kernel_h, int kernel_w,
                        int pad_h, int pad_w) {
  TensorId y = net.conv_rect(name + ".conv", x, out, kernel_h, kernel_w, 1, pad_h, pad_w);
  return net.relu(name + ".relu", net.bn(name + ".bn", y, kInceptionBnEps));
}

// The branch of average pool 3x3/1 (padding excluded from the count) then a 1x1 unit.
TensorId pool_branch(Net& net, const std::string& name, TensorId x, int64_t out) {
  TensorId y = net.avg_pool(name + ".0", x, 3, 1, 1, /*count_include_pad=*/false);
  return conv_unit(net, name + ".1", y, out, 1);
}

TensorId mixed_3a(Net& net, const std::string& p, TensorId x) {  // 64 -> 160, /2
  TensorId pool = net.max_pool(p + "maxpool", x, 3, 2);
  TensorId conv = conv_unit(net, p + "conv", x, 96, 3, 2);
  return net.concat(p + "cat", {pool, conv});
}

TensorId mixed_4a(Net& net, const std::string& p, TensorId x) {  // 160 -> 192, -2
  TensorId b0 = conv_unit(net, p + "branch0.0", x, 64, 1);
  b0 = conv_unit(net, p + "branch0.1", b0, 96, 3);
  TensorId b1 = conv_unit(net, p + "branch1.0", x, 64, 1);
  b1 = conv_unit_rect(net, p + "branch1.1", b1, 64, 1, 7, 0, 3);
  b1 = conv_unit_rect(net, p + "branch1.2", b1, 64, 7, 1, 3, 0);
  b1 = conv_unit(net, p + "branch1.3", b1, 96, 3);
  return net.concat(p + "cat", {b0, b1});
}

TensorId mixed_5a(Net& net, const std::string& p, TensorId x) {  // 192 -> 384, /2
  TensorId conv = conv_unit(net, p + "conv", x, 192, 3, 2);
  TensorId pool = net.max_pool(p + "maxpool", x, 3, 2);
  return net.concat(p + "cat", {conv, pool});
}

TensorId inception_a(Net& net, const std::string& p, TensorId x) {  // 384 -> 384
  TensorId b0 = conv_unit(net, p + "branch0", x, 96, 1);
  TensorId b1 = conv_unit(net, p + "branch1.0", x, 64, 1);
  b1 = conv_unit(net, p + "branch1.1", b1, 96, 3, 1, 1);
  TensorId b2 = conv_unit(net, p + "branch2.0", x, 64, 1);
  b2 = conv_unit(net, p + "branch2.1", b2, 96, 3, 1, 1);
  b2 = conv_unit(net, p + "branch2.2", b2, 96, 3, 1, 1);
  TensorId b3 = pool_branch(net, p + "branch3", x, 96);
  return net.concat(p + "cat", {b0, b1, b2, b3});
}

TensorId reduction_a(Net& net, const std::string& p, TensorId x) {  // 384 -> 1024, /2
  TensorId b0 = conv_unit(net, p + "branch0", x, 384, 3, 2);
  TensorId b1 = conv_unit(net, p + "branch1.0", x, 192, 1);
  b1 = conv_unit(net, p + "branch1.1", b1, 224, 3, 1, 1);
  b1 = conv_unit(net, p + "branch1.2", b1, 256, 3, 2);
  TensorId b2 = net.max_pool(p + "branch2", x, 3, 2);
  return net.concat(p + "cat", {b0, b1, b2});
}

TensorId inception_b(Net& net, const std::string& p, TensorId x) {  // 1024 -> 1024
  TensorId b0 = conv_unit(net, p + "branch0", x, 384, 1);
  TensorId b1 = conv_unit(net, p + "branch1.0", x, 192, 1);
  b1 = conv_unit_rect(net, p + "branch1.1", b1, 224, 1, 7, 0, 3);
  b1 = conv_unit_rect(net, p + "branch1.2", b1, 256, 7, 1, 3, 0);
  TensorId b2 = conv_unit(net, p + "branch2.0", x, 192, 1);
  b2 = conv_unit_rect(net, p + "branch2.1", b2, 192, 7, 1, 3, 0);
  b2 = conv_unit_rect(net, p + "branch2.2", b2, 224, 1, 7, 0, 3);
  b2 = conv_unit_rect(net, p + "branch2.3", b2, 224, 7, 1, 3, 0);
  b2 = conv_unit_rect(net, p + "branch2.4", b2, 256, 1, 7, 0, 3);
  TensorId b3 = pool_branch(net, p + "branch3", x, 128);
  return net.concat(p + "cat", {b0, b1, b2, b3});
}

TensorId reduction_b(Net& net, const std::string& p, TensorId x) {  // 1024 -> 1536, /2
  TensorId b0 = conv_unit(net, p + "branch0.0", x, 192, 1);
  b0 = conv_unit(net, p + "branch0.1", b0, 192, 3, 2);
  TensorId b1 = conv_unit(net, p + "branch1.0", x, 256, 1);
  b1 = conv_unit_rect(net, p + "branch1.1", b1, 256, 1, 7, 0, 3);
  b1 = conv_unit_rect(net, p + "branch1.2", b1, 320, 7, 1, 3, 0);
  b1 = conv_unit(net, p + "branch1.3", b1, 320, 3, 2);
  TensorId b2 = net.max_pool(p + "branch2", x, 3, 2);
  return net.concat(p + "cat", {b0, b1, b2});
}

TensorId inception_c(Net& net, const std::string& p, TensorId x) {  // 1536 -> 1536
  TensorId b0 = conv_unit(net, p + "branch0", x, 256, 1);
  TensorId b1 = conv_unit(net, p + "branch1_0", x, 384, 1);
  TensorId b1a = conv_unit_rect(net, p + "branch1_1a", b1, 256, 1, 3, 0, 1);
  TensorId b1b = conv_unit_rect(net, p + "branch1_1b", b1, 256, 3, 1, 1, 0);
  b1 = net.concat(p + "branch1.cat", {b1a, b1b});
  TensorId b2 = conv_unit(net, p + "branch2_0", x, 384, 1);
  b2 = conv_unit_rect(net, p + "branch2_1", b2, 448, 3, 1, 1, 0);
  b2 = conv_unit_rect(net, p + "branch2_2", b2, 512, 1, 3, 0, 1);
  TensorId b2a = conv_unit_rect(net, p + "branch2_3a", b2, 256, 1, 3, 0, 1);
  TensorId b2b = conv_unit_rect(net, p + "branch2_3b", b2, 256, 3, 1, 1, 0);
  b2 = net.concat(p + "branch2.cat", {b2a, b2b});
  TensorId b3 = pool_branch(net, p + "branch3", x, 256);
  return net.concat(p + "cat", {b0, b1, b2, b3});
}

}  // namespace

Result<Graph> build_inception_v4(const ModelConfig& config) {
  Net net("inception-v4", config);
  // Module indices of timm's `features` nn.Sequential.
  int index = 0;
  auto next = [&index] { return fmt::format("features.{}", index++); };
  TensorId x = conv_unit(net, next(), net.image(), 32, 3, 2);
  x = conv_unit(net, next(), x, 32, 3);
  x = conv_unit(net, next(), x, 64, 3, 1, 1);
  x = mixed_3a(net, next() + ".", x);
  x = mixed_4a(net, next() + ".", x);
  x = mixed_5a(net, next() + ".", x);
  for (int i = 0; i < 4; ++i) x = inception_a(net, next() + ".", x);
  x = reduction_a(net, next() + ".", x);
  for (int i = 0; i < 7; ++i) x = inception_b(net, next() + ".", x);
  x = reduction_b(net, next() + ".", x);
  for (int i = 0; i < 3; ++i) x = inception_c(net, next() + ".", x);
  x = net.global_avg_pool("global_pool", x);
  TensorId logits = net.linear("last_linear", x, net.num_classes());
  return std::move(net).finish(logits);
}

}  // namespace ferry
