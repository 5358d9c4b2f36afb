#include "graph/zoo/zoo.h"

#include <limits>

#include <fmt/format.h>

namespace ferry {

namespace {

template <int kDepth>
Result<Graph> vgg(const ModelConfig& c) { return build_vgg(kDepth, c); }
template <int kDepth>
Result<Graph> resnet(const ModelConfig& c) { return build_resnet(kDepth, c); }
template <int kDepth>
Result<Graph> preact(const ModelConfig& c) { return build_preact_resnet(kDepth, c); }
Result<Graph> preact_any_depth(const ModelConfig& c) { return build_preact_resnet(c.depth, c); }
template <int kDepth>
Result<Graph> densenet(const ModelConfig& c) { return build_densenet(kDepth, c); }

constexpr TransformerSpec kBertBase{false, 12, 768, 12, 30522, 512};
constexpr TransformerSpec kBertLarge{false, 24, 1024, 16, 30522, 512};
constexpr TransformerSpec kBertMini{false, 2, 64, 4, 512, 128};
constexpr TransformerSpec kGpt2Small{true, 12, 768, 12, 50257, 1024};
constexpr TransformerSpec kGpt2Medium{true, 24, 1024, 16, 50257, 1024};
constexpr TransformerSpec kGpt2Large{true, 36, 1280, 20, 50257, 1024};
constexpr TransformerSpec kGpt2Xl{true, 48, 1600, 25, 50257, 1024};
constexpr TransformerSpec kGpt2Mini{true, 2, 64, 4, 512, 128};

template <const TransformerSpec& kSpec>
Result<Graph> bert(const ModelConfig& c) { return build_bert(kSpec, c); }
template <const TransformerSpec& kSpec>
Result<Graph> bert_squad(const ModelConfig& c) { return build_bert(kSpec, c, BertHead::kSquadSpan); }
template <const TransformerSpec& kSpec>
Result<Graph> gpt2(const ModelConfig& c) { return build_gpt2(kSpec, c); }

const char* kTv = "torchvision 0.14 model card";
const char* kHf = "Hugging Face transformers (LM head tied to the word embeddings)";
const char* kHfQa = "Hugging Face transformers BertForQuestionAnswering (no pooler; qa_outputs 2 x hidden)";

std::vector<ModelEntry> make_zoo() {
  using F = ModelFamily;
  return {
      {"vgg16", F::kCnn, "VGG-16 (ImageNet, no batch norm)", 224, 1000, 138357544, 15.47, kTv, vgg<16>},
      {"vgg19", F::kCnn, "VGG-19 (ImageNet, no batch norm)", 224, 1000, 143667240, 19.63, kTv, vgg<19>},
      {"resnet18", F::kCnn, "ResNet-18 (ImageNet, basic blocks)", 224, 1000, 11689512, 1.81, kTv, resnet<18>},
      {"resnet34", F::kCnn, "ResNet-34 (ImageNet, basic blocks)", 224, 1000, 21797672, 3.66, kTv, resnet<34>},
      {"resnet50", F::kCnn, "ResNet-50 (ImageNet, bottlenecks, v1.5 stride on 3x3)", 224, 1000, 25557032, 4.09, kTv,
       resnet<50>},
      {"resnet101", F::kCnn, "ResNet-101 (ImageNet)", 224, 1000, 44549160, 7.80, kTv, resnet<101>},
      {"resnet152", F::kCnn, "ResNet-152 (ImageNet)", 224, 1000, 60192808, 11.51, kTv, resnet<152>},
      {"resnet-mini", F::kCnn, "pre-activation ResNet-11 (CIFAR, 1 bottleneck per stage) for tests", 32, 10, 0, 0,
       "", preact<11>},
      {"preact-resnet164", F::kCnn, "pre-activation ResNet-164 (CIFAR, bottlenecks)", 32, 10, 0, 0, "", preact<164>},
      {"preact-resnet1001", F::kCnn, "pre-activation ResNet-1001 (CIFAR, bottlenecks)", 32, 10, 0, 0, "",
       preact<1001>},
      {"preact-resnet", F::kCnn, "pre-activation ResNet of any depth 9n+2 (--depth; default 164), CIFAR", 32, 10, 0,
       0, "", preact_any_depth, 164},
      {"densenet121", F::kCnn, "DenseNet-121 (ImageNet, k=32)", 224, 1000, 7978856, 2.83, kTv, densenet<121>},
      {"densenet169", F::kCnn, "DenseNet-169 (ImageNet, k=32)", 224, 1000, 14149480, 3.36, kTv, densenet<169>},
      {"densenet201", F::kCnn, "DenseNet-201 (ImageNet, k=32)", 224, 1000, 20013928, 4.29, kTv, densenet<201>},
      {"densenet264", F::kCnn, "DenseNet-264 (ImageNet, k=32)", 224, 1000, 0, 0, "", densenet<264>},
      {"densenet-mini", F::kCnn, "small DenseNet-BC (CIFAR, k=12, 2 blocks of 2 layers) for tests", 32, 10, 0, 0, "",
       densenet<0>},
      {"inception-v4", F::kCnn, "Inception-v4 (ImageNet, 299x299)", 299, 1000, 42679816, 12.3,
       "timm inception_v4.tf_in1k (model card: 42.7M params, 12.3 GMACs)", build_inception_v4},
      {"bert-base", F::kTransformer, "BERT-base encoder with masked-LM head", 512, 30522, 109514298, 0, kHf,
       bert<kBertBase>},
      {"bert-large", F::kTransformer, "BERT-large encoder with masked-LM head", 512, 30522, 335174458, 0, kHf,
       bert<kBertLarge>},
      {"bert-mini", F::kTransformer, "2-layer BERT (hidden 64) for tests", 64, 512, 0, 0, "", bert<kBertMini>},
      {"bert-base-squad", F::kTransformer, "BERT-base with SQuAD span-prediction head (fine-tuning, seq 384)", 384,
       30522, 108893186, 0, kHfQa, bert_squad<kBertBase>},
      {"bert-large-squad", F::kTransformer, "BERT-large with SQuAD span-prediction head (fine-tuning, seq 384)", 384,
       30522, 334094338, 0, kHfQa, bert_squad<kBertLarge>},
      {"bert-mini-squad", F::kTransformer, "2-layer BERT with the SQuAD span head, for tests", 64, 512, 0, 0, "",
       bert_squad<kBertMini>},
      {"gpt2", F::kTransformer, "GPT-2 small decoder (124M)", 1024, 50257, 124439808, 0, kHf, gpt2<kGpt2Small>},
      {"gpt2-medium", F::kTransformer, "GPT-2 medium decoder (355M)", 1024, 50257, 354823168, 0, kHf,
       gpt2<kGpt2Medium>},
      {"gpt2-large", F::kTransformer, "GPT-2 large decoder (774M)", 1024, 50257, 774030080, 0, kHf,
       gpt2<kGpt2Large>},
      {"gpt2-xl", F::kTransformer, "GPT-2 XL decoder (1.5B)", 1024, 50257, 1557611200, 0, kHf, gpt2<kGpt2Xl>},
      {"gpt2-mini", F::kTransformer, "2-layer GPT-2 (hidden 64) for tests", 64, 512, 0, 0, "", gpt2<kGpt2Mini>},
  };
}

}  // namespace

const std::vector<ModelEntry>& model_zoo() {
  static const std::vector<ModelEntry> kZoo = make_zoo();
  return kZoo;
}

const ModelEntry* find_model(std::string_view name) {
  for (const ModelEntry& e : model_zoo())
    if (e.name == name) return &e;
  return nullptr;
}

Result<Graph> build_model(std::string_view name, const ModelConfig& config) {
  const ModelEntry* entry = find_model(name);
  if (entry == nullptr) {
    std::string names;
    for (const ModelEntry& e : model_zoo()) names += (names.empty() ? "" : ", ") + e.name;
    return Status::InvalidArgument(fmt::format("unknown model '{}' (known: {})", name, names));
  }
  ModelConfig c = config;
  if (c.batch <= 0) return Status::InvalidArgument(fmt::format("batch must be positive, got {}", c.batch));
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  if (c.batch > kMaxDim) return Status::InvalidArgument(fmt::format("batch {} is too large", c.batch));
  if (entry->family == ModelFamily::kCnn) {
    if (c.seq != 0) return Status::InvalidArgument(fmt::format("{} is a CNN: use --image, not --seq", name));
    if (c.image == 0) c.image = entry->default_size;
    if (c.image < 0 || c.image > kMaxDim)
      return Status::InvalidArgument(fmt::format("image size must be positive, got {}", c.image));
  } else {
    if (c.image != 0)
      return Status::InvalidArgument(fmt::format("{} is a transformer: use --seq, not --image", name));
    if (c.seq == 0) c.seq = entry->default_size;
    if (c.seq < 0 || c.seq > kMaxDim)
      return Status::InvalidArgument(fmt::format("sequence length must be positive, got {}", c.seq));
  }
  if (c.depth != 0 && entry->default_depth == 0)
    return Status::InvalidArgument(fmt::format(
        "{} has a fixed depth: --depth is for models built at any depth (preact-resnet)", name));
  if (c.depth == 0) c.depth = entry->default_depth;
  // 100,001 layers build ~1.07 million ops (about 1 GiB of graph): far past any published depth.
  constexpr int32_t kMaxDepth = 100001;
  if (c.depth < 0 || c.depth > kMaxDepth)
    return Status::InvalidArgument(fmt::format("depth must be between 1 and {}, got {}", kMaxDepth, c.depth));
  if (c.num_classes == 0) c.num_classes = entry->default_classes;
  if (c.num_classes < 0)
    return Status::InvalidArgument(fmt::format("number of classes must be positive, got {}", c.num_classes));
  Result<Graph> g = entry->build(c);
  if (!g.ok()) return g.status().with_context(std::string(name));
  g->info.model = entry->default_depth != 0 ? fmt::format("{}{}", entry->name, c.depth) : entry->name;
  g->info.batch = c.batch;
  g->info.image = entry->family == ModelFamily::kCnn ? c.image : 0;
  g->info.seq = entry->family == ModelFamily::kTransformer ? c.seq : 0;
  g->info.num_classes = c.num_classes;
  g->info.optimizer = c.train.optimizer;
  g->info.precision = c.precision;
  return g;
}

}  // namespace ferry
