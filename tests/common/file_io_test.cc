// Reading user-named files safely and writing outputs without losing the previous version.
#include "common/file_io.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace ferry {
namespace {

namespace fs = std::filesystem;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ferry_file_io_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string contents(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {})); }
  fs::path dir_;
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_F(FileIoTest, ReadsARegularFileWithinTheLimit) {
  std::ofstream(path("a.json")) << "{\"x\": 1}";
  Result<std::string> r = read_regular_file(path("a.json"), 100, "trace");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "{\"x\": 1}");
  Result<std::string> big = read_regular_file(path("a.json"), 4, "trace");
  ASSERT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(big.status().message(), "8 bytes, over the limit of 4 bytes")) << big.status().message();
}

// /dev/zero used to be read forever and a FIFO blocked the open: every non-regular file is
// refused before a byte is read, and a FIFO without a writer does not hang.
TEST_F(FileIoTest, RefusesWhatIsNotARegularFileWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  for (const std::string& p : {std::string("/dev/zero"), path("fifo"), dir_.string(), path("missing")}) {
    Result<std::string> r = read_regular_file(p, 1 << 20, "hardware profile");
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << p;
    EXPECT_TRUE(contains(r.status().message(), p)) << r.status().message();
  }
  EXPECT_TRUE(contains(read_regular_file("/dev/zero", 10, "x").status().message(), "a character device"));
  EXPECT_TRUE(contains(read_regular_file(path("fifo"), 10, "x").status().message(), "a FIFO"));
}

TEST_F(FileIoTest, WritesAndReplacesLeavingNoTemporary) {
  const std::string p = path("out.svg");
  ASSERT_TRUE(write_file_atomically(p, "first", "plot").ok());
  EXPECT_EQ(contents(p), "first");
  ASSERT_EQ(::chmod(p.c_str(), 0640), 0);
  ASSERT_TRUE(write_file_atomically(p, "second, longer", "plot").ok());
  EXPECT_EQ(contents(p), "second, longer");
  EXPECT_EQ(fs::status(p).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read)
      << "the replacement keeps the old file's permissions";
  EXPECT_EQ(entries(), 1u) << "no temporary left behind";
}

TEST_F(FileIoTest, WritingThroughASymlinkReplacesItsTargetAndKeepsTheLink) {
  std::ofstream(path("real.json")) << "old";
  fs::create_symlink(path("real.json"), path("link.json"));
  ASSERT_TRUE(write_file_atomically(path("link.json"), "new", "trace").ok());
  EXPECT_TRUE(fs::is_symlink(path("link.json")));
  EXPECT_EQ(contents(path("real.json")), "new");
  EXPECT_EQ(entries(), 2u);
}

// A full disk: the error says so; a device is written in place (it cannot be renamed over).
TEST_F(FileIoTest, AFullDeviceIsAnIoError) {
  Status s = write_file_atomically("/dev/full", "x", "timeline");
  ASSERT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_TRUE(contains(s.message(), "No space left on device")) << s.message();
  EXPECT_TRUE(write_file_atomically("/dev/null", "x", "timeline").ok());
}

// A write that fails part-way (here: a file-size limit, as a full disk would) keeps the previous
// file intact and leaves no temporary; truncating first used to lose it.
TEST_F(FileIoTest, AFailedWriteKeepsThePreviousFile) {
  const std::string p = path("plot.svg");
  const std::string old(5000, 'o');
  std::ofstream(p) << old;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    Status s = write_file_atomically(p, std::string(100000, 'n'), "plot");
    const bool expected = s.code() == StatusCode::kIoError && contains(s.message(), "File too large") &&
                          contains(s.message(), p);
    ::_exit(expected ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child expected an IoError saying 'File too large'";
  EXPECT_EQ(contents(p), old);
  EXPECT_EQ(entries(), 1u) << "the temporary was removed";
}

// A file or symlink planted under a temporary's name is never opened: names are random and
// created exclusively. (Planting every name is impossible; plant the obvious ones.)
TEST_F(FileIoTest, PlantedFilesNextToTheTargetAreLeftAlone) {
  std::ofstream(path("victim")) << "precious";
  fs::create_symlink(path("victim"), path("out.json.tmp"));
  fs::create_symlink(path("victim"), path("out.json.tmp-" + std::to_string(::getpid())));
  ASSERT_TRUE(write_file_atomically(path("out.json"), "output", "trace").ok());
  EXPECT_EQ(contents(path("victim")), "precious");
  EXPECT_EQ(contents(path("out.json")), "output");
}

}  // namespace
}  // namespace ferry
