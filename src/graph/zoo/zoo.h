// The model zoo: named networks built as training graphs at a chosen batch and input size.
//
// Parameter counts equal the reference implementations (torchvision for the CNNs it has,
// the original papers / timm for the others, Hugging Face for BERT and GPT-2 with tied
// embeddings); each entry records its reference so tests can compare.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/builder.h"
#include "graph/graph.h"

namespace ferry {

struct ModelConfig {
  int64_t batch = 1;
  int64_t image = 0;        // input side for CNNs; 0 = the model's default
  int64_t seq = 0;          // sequence length for transformers; 0 = the model's default
  int64_t num_classes = 0;  // 0 = the model's default (1000 ImageNet, 10 CIFAR, vocab for LMs)
  int32_t depth = 0;        // layers, for models of any depth (preact-resnet); 0 = the model's default
  TrainOptions train;
  Precision precision = Precision::kFp32;  // tensor dtypes (Note [Mixed precision] in graph.h)
};

enum class ModelFamily : uint8_t { kCnn, kTransformer };

struct ModelEntry {
  std::string name;
  ModelFamily family;
  std::string description;
  int64_t default_size;           // default image side or sequence length
  int64_t default_classes;        // default classes or vocabulary
  uint64_t reference_params;      // parameter count of the reference implementation (0 = none)
  double reference_gmacs;         // published forward GMACs at the default size, batch 1 (0 = none)
  std::string reference;          // where the reference numbers come from
  Result<Graph> (*build)(const ModelConfig& config);
  int32_t default_depth = 0;      // models built at any depth (ModelConfig::depth); 0: a fixed depth
};

// All zoo models, in display order.
const std::vector<ModelEntry>& model_zoo();
// Looks a model up by name; nullptr when unknown.
const ModelEntry* find_model(std::string_view name);
// Builds a model. Errors (InvalidArgument): unknown name (the message lists the zoo), batch or
// size out of range, sizes whose byte counts overflow 64 bits, input too small for the network.
Result<Graph> build_model(std::string_view name, const ModelConfig& config);

// Builders, one per family (cnn.cc, transformer.cc). `config` already has defaults filled in.
Result<Graph> build_vgg(int depth, const ModelConfig& config);                 // 16, 19
Result<Graph> build_resnet(int depth, const ModelConfig& config);              // 18, 34, 50, 101, 152
Result<Graph> build_preact_resnet(int depth, const ModelConfig& config);       // CIFAR bottleneck, depth = 9n+2
Result<Graph> build_densenet(int depth, const ModelConfig& config);            // 121, 169, 201, 264; 0 = mini
Result<Graph> build_inception_v4(const ModelConfig& config);
struct TransformerSpec {
  bool causal;          // GPT-2 (decoder, causal) or BERT (encoder)
  int layers, hidden, heads;
  int64_t vocab, max_positions;
};
// BERT's head: the masked-LM head of pre-training, or SQuAD's span-prediction head.
enum class BertHead : uint8_t { kMaskedLm, kSquadSpan };
Result<Graph> build_bert(const TransformerSpec& spec, const ModelConfig& config, BertHead head = BertHead::kMaskedLm);
Result<Graph> build_gpt2(const TransformerSpec& spec, const ModelConfig& config);

}  // namespace ferry
