#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data/data.h"
#include "graph/builder.h"

namespace ferry {
namespace {

Graph cnn(int64_t batch, int64_t side, int64_t classes) {
  GraphBuilder b(GraphInfo{.model = "t", .batch = batch, .image = side, .num_classes = classes});
  TensorId x = b.input("image", {batch, 3, side, side});
  TensorId y = b.labels("label", {batch});
  b.cross_entropy("loss", b.linear("fc", b.global_avg_pool("gap", b.conv2d("c", x, 4, 3, 1, 1)), classes), y);
  return std::move(b).finish(TrainOptions{}).value();
}

Graph lm(int64_t batch, int64_t seq, int64_t vocab) {
  GraphBuilder b(GraphInfo{.model = "t", .batch = batch, .seq = seq, .num_classes = vocab});
  TensorId ids = b.input("ids", {batch, seq}, DType::kI32);
  TensorId y = b.labels("labels", {batch, seq});
  TensorId e = b.embedding("emb", ids, vocab, 8, 0);
  b.cross_entropy("loss", b.linear_with("head", b.softmax("sm", e, true), b.embedding_weight(e), kNoTensor), y);
  return std::move(b).finish(TrainOptions{}).value();
}

TEST(Data, InputKindsAreReadOffTheGraph) {
  Graph g = cnn(2, 8, 5);
  auto ins = data_inputs(g);
  ASSERT_EQ(ins.size(), 2u);
  EXPECT_EQ(input_kind(g, ins[0]), InputKind::kImages);
  EXPECT_EQ(input_kind(g, ins[1]), InputKind::kLabels);
  Graph l = lm(2, 4, 11);
  auto li = data_inputs(l);
  EXPECT_EQ(input_kind(l, li[0]), InputKind::kTokenIds);
  EXPECT_EQ(input_kind(l, li[1]), InputKind::kLabels);
}

TEST(Data, SyntheticIsDeterministicAndInRange) {
  Graph g = cnn(4, 8, 5);
  auto a = make_synthetic_data(7), b = make_synthetic_data(7), c = make_synthetic_data(8);
  std::vector<std::vector<std::byte>> ha, hb, hc, hd;
  ASSERT_TRUE(a->fill(g, 3, ha).ok());
  ASSERT_TRUE(b->fill(g, 3, hb).ok());
  ASSERT_TRUE(c->fill(g, 3, hc).ok());
  ASSERT_TRUE(a->fill(g, 4, hd).ok());
  EXPECT_EQ(ha, hb);
  EXPECT_NE(ha[0], hc[0]);
  EXPECT_NE(ha[0], hd[0]);
  const int32_t* labels = reinterpret_cast<const int32_t*>(ha[1].data());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(labels[i] >= 0 && labels[i] < 5);
}

TEST(Data, CausalLabelsAreTheNextTokens) {
  Graph g = lm(2, 6, 13);
  std::vector<std::vector<std::byte>> h;
  ASSERT_TRUE(make_synthetic_data(1)->fill(g, 0, h).ok());
  const int32_t* ids = reinterpret_cast<const int32_t*>(h[0].data());
  const int32_t* labels = reinterpret_cast<const int32_t*>(h[1].data());
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i + 1 < 6; ++i) EXPECT_EQ(labels[s * 6 + i], ids[s * 6 + i + 1]);
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(ids[i] >= 0 && ids[i] < 13);
}

TEST(Data, Cifar10ReadsRecordsAndRejectsBadFiles) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("ferry_cifar_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Graph g = cnn(2, 32, 10);
  auto missing = open_cifar10(dir.string(), g);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("data_batch_1.bin"), std::string::npos);
  for (int b = 1; b <= 5; ++b) {
    std::ofstream f(dir / ("data_batch_" + std::to_string(b) + ".bin"), std::ios::binary);
    for (int r = 0; r < 3; ++r) {
      f.put(static_cast<char>((b + r) % 10));
      for (int p = 0; p < 3072; ++p) f.put(static_cast<char>(p % 256));
    }
  }
  auto src = open_cifar10(dir.string(), g);
  ASSERT_TRUE(src.ok()) << src.status().message();
  std::vector<std::vector<std::byte>> h;
  ASSERT_TRUE((*src)->fill(g, 0, h).ok());
  EXPECT_EQ(reinterpret_cast<const int32_t*>(h[1].data())[0], 1);
  EXPECT_EQ(reinterpret_cast<const int32_t*>(h[1].data())[1], 2);
  float px = reinterpret_cast<const float*>(h[0].data())[1];  // channel 0, pixel 1 = byte 1
  EXPECT_NEAR(px, (1.0f / 255.0f - 0.4914f) / 0.2470f, 1e-5f);
  { std::ofstream f(dir / "data_batch_3.bin", std::ios::binary | std::ios::app); f.put('x'); }
  auto truncated = open_cifar10(dir.string(), g);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("data_batch_3.bin"), std::string::npos);
  Graph wrong = cnn(2, 16, 10);
  EXPECT_FALSE(open_cifar10(dir.string(), wrong).ok());
  EXPECT_FALSE(open_data("imagenet:/x", g, 1).ok());
  fs::remove_all(dir);
}

// A directory where a batch file should be used to abort the process (an uncaught read error);
// it is bad input, as is a path that is a file instead of a directory.
TEST(Data, Cifar10RefusesADirectoryOrDeviceWhereABatchShouldBe) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("ferry_cifar_dir_" + std::to_string(::getpid()));
  fs::create_directories(dir / "data_batch_1.bin");
  Graph g = cnn(2, 32, 10);
  auto r = open_cifar10(dir.string(), g);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
  EXPECT_NE(r.status().message().find("a directory"), std::string::npos) << r.status().message();
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink("/dev/zero", dir / "data_batch_1.bin");
  r = open_cifar10(dir.string(), g);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
  EXPECT_NE(r.status().message().find("character device"), std::string::npos) << r.status().message();
  fs::remove_all(dir);
  EXPECT_EQ(open_data("cifar10:/etc/passwd", g, 1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
