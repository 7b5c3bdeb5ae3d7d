// HDF5 columns: what is written reads back exactly (float64, int64, UTF-8 strings, groups,
// attributes), files appear atomically, and errors name the file.
#include "catch.h"

#include <cmath>
#include <limits>
#include <random>

#include "io/hdf5_columns.h"
#include "test_util.h"

using namespace rqat;

TEST_CASE("HDF5 columns round-trip with groups, strings and attributes", "[hdf5]") {
  test::TempDir dir("hdf5");
  std::mt19937_64 rng(42);
  std::normal_distribution<double> normal;
  std::vector<double> loss(257);
  for (auto& v : loss) v = normal(rng);
  loss[3] = std::numeric_limits<double>::quiet_NaN();  // a missing metric at one step
  std::vector<int64_t> steps(257);
  for (std::size_t i = 0; i < steps.size(); ++i) steps[i] = static_cast<int64_t>(i) * 1000000007LL;
  std::vector<std::string> text = {"", "x^2 + 1", "\\frac{1}{2}", "π ≈ 3.14",
                                   std::string(5000, 'a')};

  io::Hdf5Columns out;
  out.add("train/loss", loss);
  out.add("train/step", steps);
  out.add("answers", text);
  out.add("empty", std::vector<double>{});
  out.set_attribute("tool", "qat-kd");
  out.set_attribute("model", "runs/ü");
  out.write(dir / "metrics.h5");
  REQUIRE(std::filesystem::exists(dir / "metrics.h5"));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    CHECK(entry.path().filename() == "metrics.h5");  // no temporary left behind

  const auto in = io::Hdf5Columns::read(dir / "metrics.h5");
  REQUIRE(in.columns().size() == 4);
  const auto& loss_in = std::get<std::vector<double>>(in.columns().at("train/loss"));
  REQUIRE(loss_in.size() == loss.size());
  for (std::size_t i = 0; i < loss.size(); ++i) {
    if (std::isnan(loss[i])) {
      CHECK(std::isnan(loss_in[i]));
    } else {
      CHECK(loss_in[i] == loss[i]);
    }
  }
  CHECK(std::get<std::vector<int64_t>>(in.columns().at("train/step")) == steps);
  CHECK(std::get<std::vector<std::string>>(in.columns().at("answers")) == text);
  CHECK(std::get<std::vector<double>>(in.columns().at("empty")).empty());
  CHECK(in.attributes().at("tool") == "qat-kd");
  CHECK(in.attributes().at("model") == "runs/ü");

  // Rewriting replaces the file as a whole.
  io::Hdf5Columns smaller;
  smaller.add("a", std::vector<int64_t>{1, 2, 3});
  smaller.write(dir / "metrics.h5");
  CHECK(io::Hdf5Columns::read(dir / "metrics.h5").columns().size() == 1);
}

TEST_CASE("HDF5 errors name the file", "[hdf5]") {
  test::TempDir dir("hdf5_errors");
  test::require_error([&] { io::Hdf5Columns::read(dir / "missing.h5"); }, {"missing.h5"});
  test::write_bytes(dir / "garbage.h5", "not an hdf5 file");
  test::require_error([&] { io::Hdf5Columns::read(dir / "garbage.h5"); }, {"garbage.h5", "HDF5"});
  io::Hdf5Columns columns;
  test::require_error([&] { columns.add("/bad", std::vector<double>{}); }, {"/bad"});
  columns.add("ok", std::vector<double>{1.0});
  test::write_bytes(dir / "blocker", "a file where a directory should be");
  test::require_error([&] { columns.write(dir / "blocker" / "y.h5"); }, {"y.h5"});
}
