// The files of a retrieval database: matrix files (round trip, every kind of damage refused),
// resumable matrices (resumed by the same work, restarted by other work) and stage records
// (missing, stale, done).
#include <filesystem>
#include <numeric>

#include "catch.hpp"
#include "retro/matrix_file.hpp"
#include "retro/resumable_matrix.hpp"
#include "retro/stage.hpp"
#include "test_util.hpp"

using namespace meg;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("retro: matrix files round-trip and refuse damage", "[retro]") {
  TempDir dir;
  const std::string path = dir.path("m.mat");
  std::vector<int64_t> values(6 * 5);
  std::iota(values.begin(), values.end(), -7);
  CHECK(write_matrix<int64_t>(path, 6, 5, values, 0xfeed) == 64 + values.size() * 8);
  {
    const MatrixFile m(path, MatrixDtype::kI64);
    CHECK(m.rows() == 6);
    CHECK(m.cols() == 5);
    CHECK(m.fingerprint() == 0xfeed);
    CHECK(std::vector<int64_t>(m.data<int64_t>().begin(), m.data<int64_t>().end()) == values);
    CHECK(m.row<int64_t>(2)[1] == values[11]);
    CHECK_NOTHROW(check_matrix_shape(m, 6, 0, "it"));
    CHECK_THAT(input_error_of([&] { check_matrix_shape(m, 7, 5, "the thing"); }),
               ContainsSubstring("the thing is 6 x 5, expected 7 x 5"));
  }
  CHECK_THAT(input_error_of([&] { MatrixFile(path, MatrixDtype::kF32); }),
             ContainsSubstring("offset 12: holds i64 elements, expected f32"));

  const std::string whole = read_file(path);
  auto refused = [&](std::string bytes) {
    write_file(dir.path("bad.mat"), bytes);
    return input_error_of([&] { MatrixFile(dir.path("bad.mat"), MatrixDtype::kI64); });
  };
  CHECK_THAT(refused(whole.substr(0, whole.size() - 8)), ContainsSubstring("(truncated)"));
  CHECK_THAT(refused(whole + "x"), ContainsSubstring("(trailing bytes)"));
  std::string flipped = whole;
  flipped[100] ^= 1;
  CHECK_THAT(refused(flipped), ContainsSubstring("checksum mismatch"));
  std::string magic = whole;
  magic[0] = 'X';
  CHECK_THAT(refused(magic), ContainsSubstring("offset 0: not a meg matrix file"));
  std::string version = whole;
  version[8] = 2;
  CHECK_THAT(refused(version), ContainsSubstring("offset 8: matrix file version 2 is not supported"));
  CHECK_THAT(refused(""), ContainsSubstring("not a meg matrix file"));
}

TEST_CASE("retro: a resumable matrix resumes the same work and restarts other work", "[retro]") {
  TempDir dir;
  const std::string path = dir.path("e.mat");
  std::vector<float> rows(10 * 3);
  std::iota(rows.begin(), rows.end(), 0.5f);
  {
    ResumableMatrixWriter w(path, MatrixDtype::kF32, 10, 3, 42);
    CHECK(w.rows_done() == 0);
    w.append(rows.data(), 4);
    w.append(rows.data() + 12, 2);
    // Dropped here, as a killed process drops it.
  }
  CHECK_FALSE(std::filesystem::exists(path));
  {
    ResumableMatrixWriter other(path, MatrixDtype::kF32, 10, 3, 43);  // another fingerprint
    CHECK(other.rows_done() == 0);
  }
  {
    ResumableMatrixWriter w(path, MatrixDtype::kF32, 10, 3, 42);
    CHECK(w.rows_done() == 0);  // the other work replaced the partial file
    w.append(rows.data(), 6);
  }
  ResumableMatrixWriter w(path, MatrixDtype::kF32, 10, 3, 42);
  REQUIRE(w.rows_done() == 6);
  w.append(rows.data() + 18, 4);
  CHECK(w.commit() == 64 + rows.size() * 4);
  CHECK_FALSE(std::filesystem::exists(path + ".partial"));
  CHECK_FALSE(std::filesystem::exists(path + ".progress"));
  const MatrixFile m(path, MatrixDtype::kF32);
  CHECK(m.fingerprint() == 42);
  CHECK(std::vector<float>(m.data<float>().begin(), m.data<float>().end()) == rows);
  // The same bytes as a file written in one go.
  write_matrix<float>(dir.path("one.mat"), 10, 3, rows, 42);
  CHECK(read_file(path) == read_file(dir.path("one.mat")));
}

TEST_CASE("retro: stage records tell missing, stale and done apart", "[retro]") {
  TempDir dir;
  const std::string folder = dir.path("db");
  const nlohmann::ordered_json settings = {{"version", 1}, {"chunk_length", 64}, {"inputs", {"a", "b"}}};
  CHECK(stage_status(folder, settings).state == StageState::missing);
  begin_stage(folder, false);
  write_file(folder + "/x.bin", "12345");
  finish_stage(folder, "db", settings, {"x.bin"}, {{"chunks", 3}});
  CHECK(stage_status(folder, settings).state == StageState::done);

  nlohmann::ordered_json other = settings;
  other["chunk_length"] = 32;
  const StageStatus stale = stage_status(folder, other);
  CHECK(stale.state == StageState::stale);
  CHECK(stale.why == "built with other chunk_length");

  write_file(folder + "/x.bin", "1234");
  CHECK(stage_status(folder, settings).why == "x.bin is missing or of another size than recorded");
  write_file(folder + "/stage.json", "{\"format\": ");
  CHECK(stage_status(folder, settings).why == "its record is unreadable");

  // Starting the stage again removes its record, and with it every other file unless kept.
  begin_stage(folder, true);
  CHECK(stage_status(folder, settings).state == StageState::missing);
  CHECK(std::filesystem::exists(folder + "/x.bin"));
  begin_stage(folder, false);
  CHECK_FALSE(std::filesystem::exists(folder + "/x.bin"));
}
