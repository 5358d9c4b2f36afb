// Transformer half of the model zoo: BERT (masked-LM pre-training, or SQuAD span-prediction
// fine-tuning) and GPT-2 (causal LM), written op for op after Hugging Face's BertForMaskedLM,
// BertForQuestionAnswering and GPT2LMHeadModel in training mode.
//
// Design
// - One training iteration at batch B and sequence length T: token ids [B,T] (int32) in, labels
//   [B,T] in, mean cross-entropy of the LM logits [B,T,V] out. The vocabulary V is
//   config.num_classes (the zoo fills in the model's own vocabulary by default).
// - SQuAD (BertForQuestionAnswering): the same encoder without a pooler, then `qa_outputs`, a
//   D->2 linear giving start and end logits [B,T,2]; labels [B,2] are the answer's start and end
//   positions, and the loss is the mean of the two cross-entropies over the T positions
//   (cross_entropy along axis 1), which is HF's (start_loss + end_loss) / 2.
// - Attention is the unfused textbook form, because that is what a memory planner must see: the
//   fused QKV projection is split into per-head q, k, v [B,H,T,dh]; scores = q k^T / sqrt(dh)
//   [B,H,T,T] go through softmax and dropout, and both the scores and the probabilities are
//   materialised. These [B,H,T,T] tensors are the ones that grow quadratically with T.
// - The LM head is tied to the word-embedding table (linear_with on the embedding's word weight),
//   so the table is one weight, counted once, receiving gradient from both uses; parameter counts
//   therefore equal Hugging Face's model.num_parameters().
// - Shared between the two models: attention_block() (split heads .. merge heads). What differs is
//   the placement of layer norm (GPT-2 pre-LN, BERT post-LN), the GELU flavour (tanh vs erf), the
//   causal mask, BERT's token-type table and embedding LayerNorm, and BERT's MLM transform.
// - Residual adds take the branch (the dropout output) as their first operand: it dies at the add,
//   so the add can write in place over it, whereas the residual stream is still saved for the
//   backward of the layer norm or linear that read it.
//
// Simplifications, stated so readers of the numbers know what is and is not modelled:
// - BERT's separate query/key/value linears are fused into one D->3D linear with bias
//   (`attention.self.qkv`): identical parameters and MACs, one GEMM instead of three.
// - BERT: no attention padding mask (every token is valid) and the loss covers all T positions
//   instead of only the ~15% masked ones; the decoder GEMM runs over all positions in HF as well,
//   so compute and activation memory are unchanged apart from the loss op itself.
// - GPT-2: the loss covers all T positions against labels the data pipeline has already shifted
//   (HF shifts inside the model and scores T-1 positions); the LM-head GEMM is over all T in both.
// - Token-type ids are all 0 (the builder's embedding), as for single-segment MLM batches.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "graph/builder.h"
#include "graph/zoo/zoo.h"

namespace ferry {

namespace {

// Hugging Face defaults shared by both models.
constexpr float kDropoutP = 0.1f;          // embd/attn/resid (GPT-2), hidden/attention-probs (BERT)
constexpr float kGpt2LayerNormEps = 1e-5f;  // GPT2Config.layer_norm_epsilon
constexpr float kBertLayerNormEps = 1e-12f;  // BertConfig.layer_norm_eps
constexpr int64_t kBertTypeVocab = 2;        // BertConfig.type_vocab_size

// Checks what a caller of build_bert/build_gpt2 can get wrong: the spec's shape and the sizes in
// `config`. `model` names the family in messages ("GPT-2", "BERT").
Status check_config(const char* model, const TransformerSpec& spec, const ModelConfig& config) {
  if (spec.layers <= 0 || spec.hidden <= 0 || spec.heads <= 0 || spec.vocab <= 0 || spec.max_positions <= 0)
    return Status::InvalidArgument(fmt::format(
        "{} spec needs positive layers, hidden, heads, vocab and max_positions, got {}, {}, {}, {}, {}", model,
        spec.layers, spec.hidden, spec.heads, spec.vocab, spec.max_positions));
  if (spec.hidden % spec.heads != 0)
    return Status::InvalidArgument(
        fmt::format("{} hidden size {} is not divisible by {} heads", model, spec.hidden, spec.heads));
  if (config.batch <= 0) return Status::InvalidArgument(fmt::format("batch must be positive, got {}", config.batch));
  if (config.image != 0)
    return Status::InvalidArgument(
        fmt::format("{} is a transformer: it takes a sequence length, not an image size ({})", model, config.image));
  if (config.seq <= 0)
    return Status::InvalidArgument(fmt::format("sequence length must be positive, got {}", config.seq));
  if (config.seq > spec.max_positions)
    return Status::InvalidArgument(fmt::format(
        "sequence length {} exceeds the {} learned position embeddings of {} (max_positions); use a sequence "
        "length <= {}",
        config.seq, spec.max_positions, model, spec.max_positions));
  if (config.num_classes < 0)
    return Status::InvalidArgument(fmt::format("vocabulary size must be positive, got {}", config.num_classes));
  return Status::Ok();
}

GraphInfo make_info(const char* model, const TransformerSpec& spec, const ModelConfig& config) {
  GraphInfo info;
  info.model = model;
  info.batch = config.batch;
  info.seq = config.seq;
  info.num_classes = config.num_classes > 0 ? config.num_classes : spec.vocab;
  info.optimizer = config.train.optimizer;
  info.precision = config.precision;
  return info;
}

// Multi-head self-attention from a fused projection `qkv` [B,T,3D] to the merged context [B,T,D]:
// split into q, k, v [B,H,T,dh]; probs = dropout(softmax(q k^T / sqrt(dh))); context = probs v.
TensorId attention_block(GraphBuilder& b, const std::string& prefix, TensorId qkv, int heads, int head_dim,
                         bool causal) {
  std::vector<TensorId> qkv_heads = b.split_heads(prefix + ".split_heads", qkv, heads, /*parts=*/3);
  FERRY_CHECK(qkv_heads.size() == 3, "split_heads returned {} parts", qkv_heads.size());  // kNoTensor ones after a failure
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  TensorId scores = b.matmul(prefix + ".scores", qkv_heads[0], qkv_heads[1], /*transpose_a=*/false,
                             /*transpose_b=*/true, scale);
  TensorId probs = b.softmax(prefix + ".softmax", scores, causal);
  probs = b.dropout(prefix + ".attn_dropout", probs, kDropoutP);
  TensorId context = b.matmul(prefix + ".context", probs, qkv_heads[2], false, false);
  return b.merge_heads(prefix + ".merge_heads", context);
}

}  // namespace

// GPT-2 (GPT2LMHeadModel): pre-LN decoder blocks, causal attention, tanh GELU, final ln_f, LM head
// tied to `transformer.wte.word`.
Result<Graph> build_gpt2(const TransformerSpec& spec, const ModelConfig& config) {
  FERRY_RETURN_IF_ERROR(check_config("GPT-2", spec, config));
  const GraphInfo info = make_info("gpt2", spec, config);
  const int64_t batch = info.batch, seq = info.seq, vocab = info.num_classes, hidden = spec.hidden;
  const int head_dim = spec.hidden / spec.heads;

  GraphBuilder b(info);
  TensorId ids = b.input("input_ids", {batch, seq}, DType::kI32);
  TensorId labels = b.labels("labels", {batch, seq});
  // wte [V,D] + wpe [max_positions,D]; no token types in GPT-2.
  TensorId x = b.embedding("transformer.wte", ids, vocab, hidden, spec.max_positions);
  TensorId word_table = b.failed() ? kNoTensor : b.embedding_weight(x);
  x = b.dropout("transformer.drop", x, kDropoutP);

  for (int layer = 0; layer < spec.layers; ++layer) {
    const std::string p = fmt::format("transformer.h.{}", layer);
    TensorId h = b.layer_norm(p + ".ln_1", x, kGpt2LayerNormEps);
    h = b.linear(p + ".attn.c_attn", h, 3 * hidden);
    h = attention_block(b, p + ".attn", h, spec.heads, head_dim, /*causal=*/true);
    h = b.linear(p + ".attn.c_proj", h, hidden);
    h = b.dropout(p + ".attn.resid_dropout", h, kDropoutP);
    x = b.add(p + ".residual_attn", h, x);

    h = b.layer_norm(p + ".ln_2", x, kGpt2LayerNormEps);
    h = b.linear(p + ".mlp.c_fc", h, 4 * hidden);
    h = b.gelu(p + ".mlp.act", h, /*tanh_approx=*/true);
    h = b.linear(p + ".mlp.c_proj", h, hidden);
    h = b.dropout(p + ".mlp.dropout", h, kDropoutP);
    x = b.add(p + ".residual_mlp", h, x);
  }
  x = b.layer_norm("transformer.ln_f", x, kGpt2LayerNormEps);
  TensorId logits = b.linear_with("lm_head", x, word_table, kNoTensor);
  b.cross_entropy("loss", logits, labels);
  return std::move(b).finish(config.train);
}

// BERT: embeddings + LayerNorm, post-LN encoder blocks, erf GELU, then the head: BertForMaskedLM's
// MLM head, whose decoder is tied to `bert.embeddings.word` plus its own bias
// `cls.predictions.bias` [V], or BertForQuestionAnswering's span head `qa_outputs` [2,D].
Result<Graph> build_bert(const TransformerSpec& spec, const ModelConfig& config, BertHead head) {
  FERRY_RETURN_IF_ERROR(check_config("BERT", spec, config));
  const GraphInfo info = make_info("bert", spec, config);
  const int64_t batch = info.batch, seq = info.seq, vocab = info.num_classes, hidden = spec.hidden;
  const int head_dim = spec.hidden / spec.heads;

  GraphBuilder b(info);
  TensorId ids = b.input("input_ids", {batch, seq}, DType::kI32);
  TensorId labels = head == BertHead::kSquadSpan ? b.labels("span_positions", {batch, 2})
                                                 : b.labels("labels", {batch, seq});
  // word [V,D] + position [max_positions,D] + token_type [2,D], summed, then LayerNorm and dropout.
  TensorId x = b.embedding("bert.embeddings", ids, vocab, hidden, spec.max_positions, kBertTypeVocab);
  TensorId word_table = b.failed() ? kNoTensor : b.embedding_weight(x);
  x = b.layer_norm("bert.embeddings.LayerNorm", x, kBertLayerNormEps);
  x = b.dropout("bert.embeddings.dropout", x, kDropoutP);

  for (int layer = 0; layer < spec.layers; ++layer) {
    const std::string p = fmt::format("bert.encoder.layer.{}", layer);
    // HF's query, key and value linears fused into one (same parameters and MACs).
    TensorId h = b.linear(p + ".attention.self.qkv", x, 3 * hidden);
    h = attention_block(b, p + ".attention.self", h, spec.heads, head_dim, /*causal=*/false);
    h = b.linear(p + ".attention.output.dense", h, hidden);
    h = b.dropout(p + ".attention.output.dropout", h, kDropoutP);
    x = b.add(p + ".attention.output.residual", h, x);
    x = b.layer_norm(p + ".attention.output.LayerNorm", x, kBertLayerNormEps);

    h = b.linear(p + ".intermediate.dense", x, 4 * hidden);
    h = b.gelu(p + ".intermediate.act", h, /*tanh_approx=*/false);
    h = b.linear(p + ".output.dense", h, hidden);
    h = b.dropout(p + ".output.dropout", h, kDropoutP);
    x = b.add(p + ".output.residual", h, x);
    x = b.layer_norm(p + ".output.LayerNorm", x, kBertLayerNormEps);
  }

  if (head == BertHead::kSquadSpan) {
    // Start and end logits [B,T,2]; each of the two columns is a distribution over positions.
    TensorId logits = b.linear("qa_outputs", x, 2);
    b.cross_entropy("loss", logits, labels, /*class_axis=*/1);
    return std::move(b).finish(config.train);
  }
  // MLM head: transform (dense + erf GELU + LayerNorm), then the tied decoder with its own bias.
  TensorId h = b.linear("cls.predictions.transform.dense", x, hidden);
  h = b.gelu("cls.predictions.transform.act", h, /*tanh_approx=*/false);
  h = b.layer_norm("cls.predictions.transform.LayerNorm", h, kBertLayerNormEps);
  TensorId decoder_bias = b.weight("cls.predictions.bias", {vocab});
  TensorId logits = b.linear_with("cls.predictions.decoder", h, word_table, decoder_bias);
  b.cross_entropy("loss", logits, labels);
  return std::move(b).finish(config.train);
}

}  // namespace ferry
