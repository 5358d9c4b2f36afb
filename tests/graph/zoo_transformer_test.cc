// Tests of the transformer zoo (src/graph/zoo/transformer.cc): parameter counts against Hugging
// Face, forward MACs against closed forms, size errors, the op sequence of one layer, weight tying,
// and what the backward ops read.
//
// Reference numbers come from outside Ferry: Hugging Face's model.num_parameters() for
// GPT2LMHeadModel (gpt2, gpt2-medium, gpt2-large, gpt2-xl), BertForMaskedLM (bert-base-uncased,
// bert-large-uncased) and BertForQuestionAnswering (the same checkpoints with the SQuAD span head
// and no pooler: 108,893,186 and 334,094,338), and the model dimensions of their config.json files, written here again
// rather than read from the zoo. The closed forms below are derived from the architecture and are
// themselves checked against the Hugging Face counts before being trusted for the mini models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/zoo/zoo.h"

namespace ferry {
namespace {

// Dimensions from the Hugging Face configs (n_layer/num_hidden_layers, n_embd/hidden_size, n_head/
// num_attention_heads, vocab_size, n_positions/max_position_embeddings).
struct Dims {
  const char* model;
  bool gpt2;
  int64_t layers, hidden, heads, vocab, positions;
  uint64_t hf_params;  // 0 for the mini models, which have no Hugging Face counterpart
  bool squad = false;  // BERT with the SQuAD span head instead of the masked-LM head
};

constexpr Dims kModels[] = {
    {"gpt2", true, 12, 768, 12, 50257, 1024, 124439808},
    {"gpt2-medium", true, 24, 1024, 16, 50257, 1024, 354823168},
    {"gpt2-large", true, 36, 1280, 20, 50257, 1024, 774030080},
    {"gpt2-xl", true, 48, 1600, 25, 50257, 1024, 1557611200},
    {"bert-base", false, 12, 768, 12, 30522, 512, 109514298},
    {"bert-large", false, 24, 1024, 16, 30522, 512, 335174458},
    {"gpt2-mini", true, 2, 64, 4, 512, 128, 0},
    {"bert-mini", false, 2, 64, 4, 512, 128, 0},
    {"bert-base-squad", false, 12, 768, 12, 30522, 512, 108893186, true},
    {"bert-large-squad", false, 24, 1024, 16, 30522, 512, 334094338, true},
    {"bert-mini-squad", false, 2, 64, 4, 512, 128, 0, true},
};

// Per block, both models: QKV (3D^2 + 3D), attention output (D^2 + D), FFN (4D^2 + 4D, 4D^2 + D)
// and two layer norms (2D each) = 12D^2 + 13D.
uint64_t block_params(int64_t d) { return static_cast<uint64_t>(12 * d * d + 13 * d); }

// GPT-2: wte [V,D] (shared with the LM head, counted once), wpe [P,D], blocks, ln_f.
uint64_t gpt2_params(const Dims& m) {
  const int64_t d = m.hidden;
  return static_cast<uint64_t>(m.vocab * d + m.positions * d + 2 * d) + m.layers * block_params(d);
}

// BERT-MLM: word [V,D], position [P,D], token type [2,D], embedding LayerNorm, blocks, MLM transform
// (D^2 + D dense, 2D LayerNorm) and the decoder bias [V]; the decoder weight is the word table.
// BERT-SQuAD: the same embeddings and blocks, then qa_outputs (2D + 2).
uint64_t bert_params(const Dims& m) {
  const int64_t d = m.hidden;
  const int64_t embeddings = m.vocab * d + m.positions * d + 2 * d + 2 * d;
  const int64_t head = m.squad ? 2 * d + 2 : d * d + d + 2 * d + m.vocab;
  return static_cast<uint64_t>(embeddings + head) + m.layers * block_params(d);
}

uint64_t closed_form_params(const Dims& m) { return m.gpt2 ? gpt2_params(m) : bert_params(m); }

// Forward MACs of linear and matmul ops at batch b, length t: per block 12*b*t*D^2 for the four
// linears and 2*b*t^2*D for q k^T and probs v (the causal mask does not skip work), then the LM head
// b*t*D*V, and for BERT the MLM transform b*t*D^2; BERT-SQuAD's span head instead is b*t*D*2.
uint64_t closed_form_macs(const Dims& m, int64_t b, int64_t t) {
  const uint64_t d = static_cast<uint64_t>(m.hidden), bt = static_cast<uint64_t>(b * t);
  const uint64_t block = 12 * bt * d * d + 2 * bt * static_cast<uint64_t>(t) * d;
  if (m.squad) return static_cast<uint64_t>(m.layers) * block + bt * d * 2;
  uint64_t macs = static_cast<uint64_t>(m.layers) * block + bt * d * static_cast<uint64_t>(m.vocab);
  if (!m.gpt2) macs += bt * d * d;
  return macs;
}

const Dims& dims(const std::string& model) {
  for (const Dims& m : kModels)
    if (model == m.model) return m;
  ADD_FAILURE() << "no dims for " << model;
  return kModels[0];
}

// A config for a language model; designated initialisers would leave `train` implicit.
ModelConfig lm_config(int64_t batch, int64_t seq, int64_t vocab = 0) {
  ModelConfig c;
  c.batch = batch;
  c.seq = seq;
  c.num_classes = vocab;
  return c;
}

// Graphs at batch 2, sequence 8, built once per test binary: several tests read the same model.
constexpr int64_t kBatch = 2, kSeq = 8;
const Graph& small_graph(const std::string& name) {
  static std::map<std::string, Graph> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Result<Graph> g = build_model(name, lm_config(kBatch, kSeq));
    EXPECT_TRUE(g.ok()) << name << ": " << g.status().message();
    if (!g.ok()) {
      static const Graph kEmpty;
      return kEmpty;
    }
    it = cache.emplace(name, std::move(g).value()).first;
  }
  return it->second;
}

// Forward ops whose name starts with `prefix`, in execution order.
std::vector<const Op*> forward_ops_under(const Graph& g, const std::string& prefix) {
  std::vector<const Op*> ops;
  for (const Op& op : g.ops)
    if (op.phase == Phase::kForward && op.name.compare(0, prefix.size(), prefix) == 0) ops.push_back(&op);
  return ops;
}

const Op* find_forward_op(const Graph& g, const std::string& name) {
  for (const Op& op : g.ops)
    if (op.phase == Phase::kForward && op.name == name) return &op;
  return nullptr;
}

int count_ops(const Graph& g, OpType type, Phase phase) {
  int n = 0;
  for (const Op& op : g.ops) n += op.phase == phase && op.type == type;
  return n;
}

bool reads(const Op& op, TensorId t) {
  for (TensorId in : op.inputs)
    if (in == t) return true;
  return false;
}

// Backward kernels derived from forward op `fwd` (by Op::forward_op), leaving out the gradient
// sums that autodiff attributes to the op whose contribution completed them.
std::vector<const Op*> backward_of(const Graph& g, const Op& fwd) {
  std::vector<const Op*> ops;
  for (const Op& op : g.ops)
    if (op.phase == Phase::kBackward && op.forward_op == fwd.id && op.type != OpType::kGradAccumulate)
      ops.push_back(&op);
  return ops;
}

std::vector<OpType> types_of(const std::vector<const Op*>& ops) {
  std::vector<OpType> types;
  for (const Op* op : ops) types.push_back(op->type);
  return types;
}

// --- Parameters ----------------------------------------------------------------------------------

TEST(ZooTransformer, ClosedFormsReproduceHuggingFaceCounts) {
  // Validates the formulas before they are trusted for the mini models.
  for (const Dims& m : kModels) {
    if (m.hf_params == 0) continue;
    SCOPED_TRACE(m.model);
    EXPECT_EQ(closed_form_params(m), m.hf_params);
  }
}

TEST(ZooTransformer, ParamsEqualHuggingFaceAndClosedForm) {
  for (const Dims& m : kModels) {
    SCOPED_TRACE(m.model);
    const Graph& g = small_graph(m.model);
    ASSERT_FALSE(g.ops.empty());
    EXPECT_EQ(g.param_count(), closed_form_params(m));
    if (m.hf_params != 0) {
      EXPECT_EQ(g.param_count(), m.hf_params);
    }
  }
}

TEST(ZooTransformer, RegistryCarriesTheReferences) {
  for (const Dims& m : kModels) {
    SCOPED_TRACE(m.model);
    const ModelEntry* e = find_model(m.model);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->family, ModelFamily::kTransformer);
    EXPECT_EQ(e->reference_params, m.hf_params);
    EXPECT_EQ(e->default_classes, m.vocab);
    EXPECT_LE(e->default_size, m.positions);
    if (m.hf_params != 0) {
      EXPECT_FALSE(e->reference.empty());
    }
  }
}

TEST(ZooTransformer, ParamsDoNotDependOnBatchOrSequence) {
  for (const char* model : {"gpt2-mini", "bert-mini", "bert-mini-squad"}) {
    SCOPED_TRACE(model);
    Result<Graph> g = build_model(model, lm_config(3, 128));
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_EQ(g->param_count(), small_graph(model).param_count());
    EXPECT_EQ(g->ops.size(), small_graph(model).ops.size());
  }
}

TEST(ZooTransformer, VocabularyFollowsNumClasses) {
  // The word table is [V,D] and tied to the output layer, so V moves the count by V*D once; BERT's
  // decoder bias adds V more.
  for (const char* model : {"gpt2-mini", "bert-mini"}) {
    SCOPED_TRACE(model);
    const Dims& m = dims(model);
    Result<Graph> g = build_model(model, lm_config(1, 8, 1000));
    ASSERT_TRUE(g.ok()) << g.status().message();
    const uint64_t per_word = static_cast<uint64_t>(m.hidden) + (m.gpt2 ? 0 : 1);
    EXPECT_EQ(g->param_count(), closed_form_params(m) + (1000 - m.vocab) * per_word);
    EXPECT_EQ(g->info.num_classes, 1000);
    const Op* ce = nullptr;
    for (const Op& op : g->ops)
      if (op.type == OpType::kCrossEntropy) ce = &op;
    ASSERT_NE(ce, nullptr);
    EXPECT_EQ(g->tensor(ce->inputs[0]).shape, (std::vector<int64_t>{1, 8, 1000}));
  }
}

// --- Compute -------------------------------------------------------------------------------------

TEST(ZooTransformer, ForwardMacsMatchClosedForm) {
  for (const Dims& m : kModels) {
    SCOPED_TRACE(m.model);
    EXPECT_EQ(small_graph(m.model).forward_macs(), closed_form_macs(m, kBatch, kSeq));
  }
}

TEST(ZooTransformer, ForwardMacsAtFullContextMatchClosedForm) {
  // At the full context the t^2 attention term is no longer negligible: 2*t*D vs 12*D^2 per token.
  for (const char* model : {"gpt2", "bert-base", "gpt2-mini", "bert-mini", "bert-base-squad"}) {
    SCOPED_TRACE(model);
    const Dims& m = dims(model);
    Result<Graph> g = build_model(model, lm_config(1, m.positions));
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_EQ(g->forward_macs(), closed_form_macs(m, 1, m.positions));
    EXPECT_EQ(g->info.seq, m.positions);
  }
}

// --- Sizes and errors ----------------------------------------------------------------------------

TEST(ZooTransformer, SequenceLongerThanPositionTableIsInvalid) {
  for (const Dims& m : kModels) {
    SCOPED_TRACE(m.model);
    Result<Graph> g = build_model(m.model, lm_config(1, m.positions + 1));
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    const std::string& msg = g.status().message();
    EXPECT_NE(msg.find(std::to_string(m.positions + 1)), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(m.positions)), std::string::npos) << msg;
    EXPECT_NE(msg.find(m.model), std::string::npos) << msg;
  }
  // The limit itself is fine.
  EXPECT_TRUE(build_model("gpt2-mini", lm_config(1, 128)).ok());
  EXPECT_TRUE(build_model("bert-mini", lm_config(1, 128)).ok());
}

TEST(ZooTransformer, ImageSizeIsRejected) {
  for (const char* model : {"gpt2", "bert-base", "gpt2-mini"}) {
    SCOPED_TRACE(model);
    ModelConfig config = lm_config(1, 0);
    config.image = 224;
    Result<Graph> g = build_model(model, config);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find("image"), std::string::npos) << g.status().message();
  }
  // Also when the family builder is called directly, bypassing the registry's check.
  const TransformerSpec spec{true, 1, 32, 2, 100, 16};
  ModelConfig config = lm_config(1, 8, 100);
  config.image = 32;
  Result<Graph> g = build_gpt2(spec, config);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
}

TEST(ZooTransformer, DirectCallsValidateSpecAndConfig) {
  const ModelConfig ok_config = lm_config(1, 8, 100);
  EXPECT_TRUE(build_gpt2(TransformerSpec{true, 1, 32, 2, 100, 16}, ok_config).ok());
  EXPECT_TRUE(build_bert(TransformerSpec{false, 1, 32, 2, 100, 16}, ok_config).ok());
  // Hidden size not divisible by the heads.
  Result<Graph> bad_heads = build_bert(TransformerSpec{false, 1, 30, 4, 100, 16}, ok_config);
  ASSERT_FALSE(bad_heads.ok());
  EXPECT_EQ(bad_heads.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_heads.status().message().find("30"), std::string::npos) << bad_heads.status().message();
  // Missing or non-positive sizes.
  for (int64_t seq : {0, -3}) {
    Result<Graph> g = build_gpt2(TransformerSpec{true, 1, 32, 2, 100, 16}, lm_config(1, seq));
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  }
  Result<Graph> no_layers = build_gpt2(TransformerSpec{true, 0, 32, 2, 100, 16}, ok_config);
  EXPECT_FALSE(no_layers.ok());
}

// --- Structure -----------------------------------------------------------------------------------

TEST(ZooTransformer, Gpt2BlockIsPreLayerNorm) {
  const Graph& g = small_graph("gpt2-mini");
  const std::vector<const Op*> block = forward_ops_under(g, "transformer.h.0.");
  const std::vector<OpType> expected = {
      OpType::kLayerNorm, OpType::kLinear,  OpType::kSplitHeads, OpType::kMatMul,    OpType::kSoftmax,
      OpType::kDropout,   OpType::kMatMul,  OpType::kMergeHeads, OpType::kLinear,    OpType::kDropout,
      OpType::kAdd,       OpType::kLayerNorm, OpType::kLinear,   OpType::kGelu,      OpType::kLinear,
      OpType::kDropout,   OpType::kAdd};
  EXPECT_EQ(types_of(block), expected);
  ASSERT_EQ(block.size(), expected.size());

  const int64_t d = 64, heads = 4, dh = 16;
  EXPECT_FLOAT_EQ(block[0]->attrs.eps, 1e-5f);
  EXPECT_EQ(g.tensor(block[1]->outputs[0]).shape, (std::vector<int64_t>{kBatch, kSeq, 3 * d}));
  EXPECT_TRUE(block[1]->attrs.has_bias);
  EXPECT_EQ(block[2]->attrs.heads, heads);
  EXPECT_EQ(block[2]->attrs.parts, 3);
  EXPECT_TRUE(block[3]->attrs.transpose_b);
  EXPECT_FALSE(block[3]->attrs.transpose_a);
  EXPECT_FLOAT_EQ(block[3]->attrs.scale, 1.0f / std::sqrt(static_cast<float>(dh)));
  EXPECT_EQ(g.tensor(block[3]->outputs[0]).shape, (std::vector<int64_t>{kBatch, heads, kSeq, kSeq}));
  EXPECT_TRUE(block[4]->attrs.causal);
  EXPECT_FLOAT_EQ(block[5]->attrs.dropout_p, 0.1f);
  // q k^T reads q and k; probs v reads v, all from the one split.
  EXPECT_EQ(block[3]->inputs, (std::vector<TensorId>{block[2]->outputs[0], block[2]->outputs[1]}));
  EXPECT_EQ(block[6]->inputs[1], block[2]->outputs[2]);
  EXPECT_EQ(g.tensor(block[12]->outputs[0]).shape, (std::vector<int64_t>{kBatch, kSeq, 4 * d}));
  EXPECT_TRUE(block[13]->attrs.gelu_tanh);
  // Pre-LN: each residual add sums the branch with the block's un-normalised input stream.
  EXPECT_TRUE(reads(*block[10], block[0]->inputs[0]));
  EXPECT_TRUE(reads(*block[16], block[11]->inputs[0]));
  EXPECT_EQ(block[11]->inputs[0], block[10]->outputs[0]);
}

TEST(ZooTransformer, Gpt2EmbeddingAndTiedHead) {
  const Graph& g = small_graph("gpt2-mini");
  const Dims& m = dims("gpt2-mini");
  // The first forward ops: embedding (word + position, no token type) then dropout.
  ASSERT_GE(g.ops.size(), 2u);
  const Op& embed = g.ops[0];
  ASSERT_EQ(embed.type, OpType::kEmbedding);
  ASSERT_EQ(embed.inputs.size(), 3u);
  EXPECT_EQ(g.tensor(embed.inputs[0]).dtype, DType::kI32);
  EXPECT_EQ(g.tensor(embed.inputs[0]).shape, (std::vector<int64_t>{kBatch, kSeq}));
  EXPECT_EQ(g.tensor(embed.inputs[1]).shape, (std::vector<int64_t>{m.vocab, m.hidden}));
  EXPECT_EQ(g.tensor(embed.inputs[2]).shape, (std::vector<int64_t>{m.positions, m.hidden}));
  EXPECT_EQ(g.ops[1].type, OpType::kDropout);

  // Final ln_f, then the LM head reading the same word table, no bias, then the loss.
  const Op* ln_f = find_forward_op(g, "transformer.ln_f");
  const Op* head = find_forward_op(g, "lm_head");
  ASSERT_NE(ln_f, nullptr);
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->type, OpType::kLinear);
  EXPECT_EQ(head->inputs, (std::vector<TensorId>{ln_f->outputs[0], embed.inputs[1]}));
  EXPECT_FALSE(head->attrs.has_bias);
  const Op& ce = g.op(head->id + 1);
  EXPECT_EQ(ce.type, OpType::kCrossEntropy);
  EXPECT_EQ(ce.inputs[0], head->outputs[0]);
  EXPECT_EQ(ce.outputs[0], g.loss);
  EXPECT_EQ(g.tensor(ce.inputs[1]).shape, (std::vector<int64_t>{kBatch, kSeq}));

  // Whole-graph counts: 4 linears and 1 causal softmax per block, plus the head.
  EXPECT_EQ(count_ops(g, OpType::kLinear, Phase::kForward), 4 * m.layers + 1);
  EXPECT_EQ(count_ops(g, OpType::kSoftmax, Phase::kForward), m.layers);
  EXPECT_EQ(count_ops(g, OpType::kLayerNorm, Phase::kForward), 2 * m.layers + 1);
  EXPECT_EQ(count_ops(g, OpType::kDropout, Phase::kForward), 3 * m.layers + 1);
}

TEST(ZooTransformer, BertBlockIsPostLayerNorm) {
  const Graph& g = small_graph("bert-mini");
  const std::vector<const Op*> block = forward_ops_under(g, "bert.encoder.layer.0.");
  const std::vector<OpType> expected = {
      OpType::kLinear,  OpType::kSplitHeads, OpType::kMatMul, OpType::kSoftmax, OpType::kDropout,
      OpType::kMatMul,  OpType::kMergeHeads, OpType::kLinear, OpType::kDropout, OpType::kAdd,
      OpType::kLayerNorm, OpType::kLinear,   OpType::kGelu,   OpType::kLinear,  OpType::kDropout,
      OpType::kAdd,     OpType::kLayerNorm};
  EXPECT_EQ(types_of(block), expected);
  ASSERT_EQ(block.size(), expected.size());

  EXPECT_EQ(g.tensor(block[0]->outputs[0]).shape, (std::vector<int64_t>{kBatch, kSeq, 3 * 64}));
  EXPECT_FALSE(block[3]->attrs.causal);
  EXPECT_FLOAT_EQ(block[2]->attrs.scale, 0.25f);
  EXPECT_FALSE(block[12]->attrs.gelu_tanh);
  EXPECT_FLOAT_EQ(block[10]->attrs.eps, 1e-12f);
  EXPECT_FLOAT_EQ(block[16]->attrs.eps, 1e-12f);
  // Post-LN: the layer norm normalises the residual sum, and the next sublayer reads its output.
  EXPECT_EQ(block[10]->inputs[0], block[9]->outputs[0]);
  EXPECT_EQ(block[11]->inputs[0], block[10]->outputs[0]);
  EXPECT_TRUE(reads(*block[9], block[0]->inputs[0]));
  EXPECT_TRUE(reads(*block[15], block[10]->outputs[0]));
  // The next block reads this block's last layer norm.
  const std::vector<const Op*> next = forward_ops_under(g, "bert.encoder.layer.1.");
  ASSERT_FALSE(next.empty());
  EXPECT_EQ(next[0]->inputs[0], block[16]->outputs[0]);
}

TEST(ZooTransformer, BertEmbeddingsAndMlmHead) {
  const Graph& g = small_graph("bert-mini");
  const Dims& m = dims("bert-mini");
  const Op& embed = g.ops[0];
  ASSERT_EQ(embed.type, OpType::kEmbedding);
  ASSERT_EQ(embed.inputs.size(), 4u);  // ids, word, position, token type
  EXPECT_EQ(g.tensor(embed.inputs[1]).shape, (std::vector<int64_t>{m.vocab, m.hidden}));
  EXPECT_EQ(g.tensor(embed.inputs[2]).shape, (std::vector<int64_t>{m.positions, m.hidden}));
  EXPECT_EQ(g.tensor(embed.inputs[3]).shape, (std::vector<int64_t>{2, m.hidden}));
  EXPECT_EQ(g.ops[1].type, OpType::kLayerNorm);
  EXPECT_FLOAT_EQ(g.ops[1].attrs.eps, 1e-12f);
  EXPECT_EQ(g.ops[2].type, OpType::kDropout);

  // MLM head: dense D->D, erf GELU, LayerNorm, decoder tied to the word table with a [V] bias.
  const std::vector<const Op*> head = forward_ops_under(g, "cls.predictions.");
  EXPECT_EQ(types_of(head),
            (std::vector<OpType>{OpType::kLinear, OpType::kGelu, OpType::kLayerNorm, OpType::kLinear}));
  ASSERT_EQ(head.size(), 4u);
  EXPECT_EQ(g.tensor(head[0]->outputs[0]).shape, (std::vector<int64_t>{kBatch, kSeq, m.hidden}));
  EXPECT_FALSE(head[1]->attrs.gelu_tanh);
  ASSERT_EQ(head[3]->inputs.size(), 3u);
  EXPECT_EQ(head[3]->inputs[1], embed.inputs[1]);
  const Tensor& bias = g.tensor(head[3]->inputs[2]);
  EXPECT_EQ(bias.role, TensorRole::kWeight);
  EXPECT_EQ(bias.shape, (std::vector<int64_t>{m.vocab}));
  EXPECT_EQ(g.tensor(head[3]->outputs[0]).shape, (std::vector<int64_t>{kBatch, kSeq, m.vocab}));

  // No pooler: 4 linears per block plus transform and decoder; softmax never causal.
  EXPECT_EQ(count_ops(g, OpType::kLinear, Phase::kForward), 4 * m.layers + 2);
  for (const Op& op : g.ops)
    if (op.type == OpType::kSoftmax) {
      EXPECT_FALSE(op.attrs.causal) << op.name;
    }
}

// --- Backward ------------------------------------------------------------------------------------

TEST(ZooTransformer, TiedWordTableIsOneWeightWithSummedGradient) {
  for (const char* model : {"gpt2-mini", "bert-mini"}) {
    SCOPED_TRACE(model);
    const Graph& g = small_graph(model);
    const TensorId word = g.ops[0].inputs[1];
    int tables = 0;
    for (const Tensor& t : g.tensors)
      tables += t.role == TensorRole::kWeight && t.shape == g.tensor(word).shape;
    EXPECT_EQ(tables, 1);
    // Exactly one update of the table, reading the sum of the head's and the embedding's gradients.
    std::vector<const Op*> updates;
    for (const Op& op : g.ops)
      if (op.phase == Phase::kUpdate && !op.inputs.empty() && op.inputs[0] == word) updates.push_back(&op);
    ASSERT_EQ(updates.size(), 1u);
    const TensorId dword = updates[0]->inputs[1];
    const Op* producer = nullptr;
    for (const Op& op : g.ops)
      if (!op.outputs.empty() && op.outputs[0] == dword) producer = &op;
    ASSERT_NE(producer, nullptr);
    EXPECT_EQ(producer->type, OpType::kGradAccumulate);
    std::vector<OpType> sources;
    for (TensorId part : producer->inputs)
      for (const Op& op : g.ops)
        for (TensorId out : op.outputs)
          if (out == part && op.phase == Phase::kBackward) sources.push_back(op.type);
    EXPECT_EQ(sources.size(), 2u);
    EXPECT_NE(std::find(sources.begin(), sources.end(), OpType::kLinearBwdWeights), sources.end());
    EXPECT_NE(std::find(sources.begin(), sources.end(), OpType::kEmbeddingBwd), sources.end());
  }
}

TEST(ZooTransformer, BackwardReadsWhatTheKernelsNeed) {
  for (const char* model : {"gpt2-mini", "bert-mini"}) {
    SCOPED_TRACE(model);
    const Graph& g = small_graph(model);
    const Dims& m = dims(model);
    ASSERT_TRUE(g.validate().ok()) << g.validate().message();
    int softmax_seen = 0;
    for (const Op& f : g.ops) {
      if (f.phase != Phase::kForward) continue;
      const std::vector<const Op*> bwd = backward_of(g, f);
      switch (f.type) {
        case OpType::kSoftmax:  // reads its output y, not its input
          ++softmax_seen;
          ASSERT_EQ(types_of(bwd), std::vector<OpType>{OpType::kSoftmaxBwd}) << f.name;
          EXPECT_TRUE(reads(*bwd[0], f.outputs[0])) << f.name;
          EXPECT_FALSE(reads(*bwd[0], f.inputs[0])) << f.name;
          break;
        case OpType::kDropout:  // reads the mask only
          ASSERT_EQ(types_of(bwd), std::vector<OpType>{OpType::kDropoutBwd}) << f.name;
          EXPECT_EQ(g.tensor(f.outputs[1]).role, TensorRole::kWorkspace);
          EXPECT_TRUE(reads(*bwd[0], f.outputs[1])) << f.name;
          break;
        case OpType::kGelu:  // reads its input
          ASSERT_EQ(types_of(bwd), std::vector<OpType>{OpType::kGeluBwd}) << f.name;
          EXPECT_TRUE(reads(*bwd[0], f.inputs[0])) << f.name;
          break;
        case OpType::kLayerNorm:  // reads input, gamma and saved statistics
          ASSERT_EQ(types_of(bwd), std::vector<OpType>{OpType::kLayerNormBwd}) << f.name;
          for (TensorId t : {f.inputs[0], f.inputs[1], f.outputs[1], f.outputs[2]})
            EXPECT_TRUE(reads(*bwd[0], t)) << f.name;
          break;
        case OpType::kLinear: {  // data gradient reads W; weight gradient reads the input x
          bool has_weights = false;
          for (const Op* b : bwd) {
            if (b->type == OpType::kLinearBwdWeights) {
              has_weights = true;
              EXPECT_TRUE(reads(*b, f.inputs[0])) << f.name;
            } else if (b->type == OpType::kLinearBwdData) {
              EXPECT_TRUE(reads(*b, f.inputs[1])) << f.name;
            }
          }
          EXPECT_TRUE(has_weights) << f.name;
          break;
        }
        case OpType::kMatMul:  // each operand's gradient reads the other operand
          ASSERT_EQ(bwd.size(), 2u) << f.name;
          EXPECT_TRUE(reads(*bwd[0], f.inputs[1]) || reads(*bwd[1], f.inputs[1])) << f.name;
          EXPECT_TRUE(reads(*bwd[0], f.inputs[0]) || reads(*bwd[1], f.inputs[0])) << f.name;
          break;
        case OpType::kCrossEntropy:
          ASSERT_EQ(types_of(bwd), std::vector<OpType>{OpType::kCrossEntropyBwd}) << f.name;
          EXPECT_TRUE(reads(*bwd[0], f.outputs[1])) << f.name;  // log-probabilities
          break;
        default: break;
      }
    }
    EXPECT_EQ(softmax_seen, m.layers);
    // The q, k, v gradients are merged back into one [B,T,3D] gradient for the fused projection.
    EXPECT_EQ(count_ops(g, OpType::kMergeHeads, Phase::kBackward), m.layers);
    EXPECT_EQ(count_ops(g, OpType::kSplitHeads, Phase::kBackward), m.layers);
    EXPECT_EQ(count_ops(g, OpType::kEmbeddingBwd, Phase::kBackward), 1);
    // One optimizer update per weight tensor.
    int weights = 0;
    for (const Tensor& t : g.tensors) weights += t.role == TensorRole::kWeight;
    EXPECT_EQ(count_ops(g, OpType::kSgdUpdate, Phase::kUpdate), weights);
  }
}

TEST(ZooTransformer, SquadHeadIsASpanCrossEntropyOverPositions) {
  const Graph& g = small_graph("bert-mini-squad");
  ASSERT_FALSE(g.ops.empty());
  // No masked-LM head: the last forward ops are qa_outputs and the loss.
  EXPECT_EQ(find_forward_op(g, "cls.predictions.decoder"), nullptr);
  const Op* qa = find_forward_op(g, "qa_outputs");
  ASSERT_NE(qa, nullptr);
  EXPECT_EQ(qa->type, OpType::kLinear);
  EXPECT_EQ(g.tensor(qa->inputs[1]).shape, (std::vector<int64_t>{2, 64}));
  const Op* loss = find_forward_op(g, "loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->type, OpType::kCrossEntropy);
  EXPECT_EQ(loss->inputs[0], qa->outputs[0]);
  EXPECT_EQ(g.tensor(loss->inputs[0]).shape, (std::vector<int64_t>{kBatch, kSeq, 2}));  // start, end logits
  EXPECT_EQ(g.tensor(loss->inputs[1]).shape, (std::vector<int64_t>{kBatch, 2}));        // start, end positions
  EXPECT_EQ(loss->attrs.class_axis, 1);  // a distribution over the T positions
  // The default sequence is SQuAD's 384 (DeepLearningExamples' and HF's run_squad max_seq_length).
  EXPECT_EQ(find_model("bert-base-squad")->default_size, 384);
  // The MLM head's logits [B,T,V] are gone: the squad graph is smaller than the MLM one.
  uint64_t mlm_bytes = 0, squad_bytes = 0;
  for (const Tensor& t : small_graph("bert-mini").tensors) mlm_bytes += t.bytes;
  for (const Tensor& t : g.tensors) squad_bytes += t.bytes;
  EXPECT_LT(squad_bytes, mlm_bytes);
}

TEST(ZooTransformer, LargestModelBuildsWithAdam) {
  ModelConfig config = lm_config(1, 8);
  config.train.optimizer = OptimizerKind::kAdam;
  Result<Graph> g = build_model("gpt2-xl", config);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->info.optimizer, OptimizerKind::kAdam);
  EXPECT_EQ(g->info.model, "gpt2-xl");
  uint64_t state = 0;
  for (const Tensor& t : g->tensors)
    if (t.role == TensorRole::kOptimizerState) state += static_cast<uint64_t>(t.numel());
  EXPECT_EQ(state, 2 * dims("gpt2-xl").hf_params);  // two moments per parameter
}

}  // namespace
}  // namespace ferry
