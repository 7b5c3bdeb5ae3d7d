// TensorBoard event files (io/tensorboard_events.h): CRC32C against its published check values and
// a bit-by-bit loop, the masked CRC worked by hand, seeded random scalars and texts read back as
// written (float32 values, steps past 2^40, UTF-8 with newlines), one-line errors naming the file
// and record for damaged records, a cut-short last record ignored, and the flush timer.
// With RQAT_TB_FIXTURE_DIR set, the "[fixture]" case writes the file that
// tests/python/test_tensorboard_events.py reads with the tensorboard package itself.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <regex>

#include "io/tensorboard_events.h"
#include "test_util.h"

using namespace rqat;
namespace fs = std::filesystem;

namespace {

// CRC-32C one bit at a time (RFC 3720's definition), independent of the library's table.
uint32_t crc32c_bitwise(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const char c : data) {
    crc ^= static_cast<uint8_t>(c);
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

// What one add_* call wrote, to compare with what the reader gives back.
struct Written {
  double wall_time;
  int64_t step;
  std::string tag;
  std::optional<float> value;
  std::optional<std::string> text;
};

void check_read_back(const std::vector<io::TensorBoardEvent>& events,
                     const std::vector<Written>& written) {
  REQUIRE(events.size() == written.size() + 1);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].values.empty());
  for (size_t i = 0; i < written.size(); ++i) {
    INFO("event " << i + 1 << " tag " << written[i].tag);
    const io::TensorBoardEvent& e = events[i + 1];
    CHECK(e.wall_time == written[i].wall_time);
    CHECK(e.step == written[i].step);
    CHECK_FALSE(e.file_version);
    REQUIRE(e.values.size() == 1);
    CHECK(e.values[0].tag == written[i].tag);
    CHECK(e.values[0].simple_value == written[i].value);
    CHECK(e.values[0].text == written[i].text);
    CHECK(e.values[0].plugin_name == (written[i].text ? "text" : ""));
  }
}

// Writes a writer's worth of seeded random scalars and texts; returns what it wrote.
std::vector<Written> write_random_events(io::TensorBoardWriter& writer, uint32_t seed, int count) {
  std::mt19937 rng(seed);
  const std::vector<std::string> tags = {"train/loss", "train/lr", "eval/accuracy",
                                         "grad norm/\xC3\xBCnits"};
  const std::vector<std::string> texts = {
      "", "one line", "**step** 1\n\n| q | a |\n|---|---|\n| 2+2 | 4 |\n",
      "na\xC3\xAFve \xE2\x80\x94 \xE2\x9C\x93 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\r\nend\n"};
  std::uniform_real_distribution<double> magnitude(-1e6, 1e6);
  std::uniform_real_distribution<double> seconds(1.6e9, 1.8e9);
  std::uniform_int_distribution<int64_t> big_step(int64_t{1} << 40, int64_t{1} << 62);
  std::vector<Written> written;
  for (int i = 0; i < count; ++i) {
    const double wall_time = seconds(rng);
    const int kind = static_cast<int>(rng() % 8);
    // Steps: 0 (left out of the encoding), small, negative, past 2^40.
    const int64_t step = i == 0 ? 0 : (kind < 2 ? big_step(rng) : kind == 2 ? -i : i);
    if (kind == 7) {
      const std::string& text = texts[rng() % texts.size()];
      writer.add_text("samples", text, step, wall_time);
      written.push_back({wall_time, step, "samples", std::nullopt, text});
    } else {
      // Values: 0, tiny, negative and positive, and past float's range (stored as inf).
      const double value = kind == 3   ? 0.0
                           : kind == 4 ? 1e-30
                           : kind == 5 ? -1e300
                                       : magnitude(rng);
      const std::string& tag = tags[rng() % tags.size()];
      writer.add_scalar(tag, value, step, wall_time);
      written.push_back({wall_time, step, tag, static_cast<float>(value), std::nullopt});
    }
  }
  return written;
}

}  // namespace

TEST_CASE("CRC32C gives its check values; the mask is TensorFlow's", "[tensorboard]") {
  CHECK(io::crc32c("") == 0);
  CHECK(io::crc32c("123456789") == 0xE3069283u);            // the standard check value
  CHECK(io::crc32c(std::string(32, '\0')) == 0x8A9136AAu);  // RFC 3720 B.4
  // By hand: crc = 0xE3069283; crc >> 15 = 0x0001C60D; crc << 17 = 0x25060000 (mod 2^32);
  // or = 0x2507C60D; + 0xA282EAD8 = 0xC78AB0E5.
  CHECK(io::masked_crc32c("123456789") == 0xC78AB0E5u);
  // crc = 0x8A9136AA; 0x00011522 | 0x6D540000 = 0x6D551522; + 0xA282EAD8 = 0x10FD7FFFA, which
  // wraps to 0x0FD7FFFA.
  CHECK(io::masked_crc32c(std::string(32, '\0')) == 0x0FD7FFFAu);

  std::mt19937 rng(7);
  for (size_t length : {1, 3, 8, 15, 64, 257, 1000}) {
    std::string data(length, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    INFO("length " << length);
    CHECK(io::crc32c(data) == crc32c_bitwise(data));
  }
}

TEST_CASE("Event files read back as written", "[tensorboard]") {
  test::TempDir dir("tensorboard_round_trip");
  const fs::path logdir = dir / "runs/a";  // created with its parents
  const double before = io::unix_seconds_now();
  std::vector<Written> written;
  fs::path path;
  {
    io::TensorBoardWriter writer(logdir);
    path = writer.path();
    written = write_random_events(writer, /*seed=*/12345, /*count=*/300);
  }  // the destructor flushes
  CHECK(path.parent_path() == logdir);
  const std::string name = path.filename().string();
  CHECK(std::regex_match(name, std::regex(R"(events\.out\.tfevents\.\d{10}\..+\.\d+\.\d+)")));
  CHECK(name.find(fmt::format(".{}.", ::getpid())) != std::string::npos);

  const auto events = io::read_tensorboard_events(path);
  check_read_back(events, written);
  CHECK(events[0].wall_time >= before - 1);
  CHECK(events[0].wall_time <= io::unix_seconds_now() + 1);
  // Sanity of the test's own mix: every kind of step and value occurred.
  auto any = [&](auto predicate) { return std::any_of(written.begin(), written.end(), predicate); };
  CHECK(any([](const Written& w) { return w.step > (int64_t{1} << 40); }));
  CHECK(any([](const Written& w) { return w.step < 0; }));
  CHECK(any([](const Written& w) { return w.value && *w.value < 0; }));
  CHECK(any([](const Written& w) { return w.value == 0.0f; }));
  CHECK(any([](const Written& w) { return w.value && std::isinf(*w.value); }));
  CHECK(any([](const Written& w) { return w.text && w.text->find('\n') != std::string::npos; }));

  // Two writers on one directory in one second write two files.
  io::TensorBoardWriter first(logdir);
  io::TensorBoardWriter second(logdir);
  CHECK(first.path() != second.path());
  CHECK(first.path() != path);
}

TEST_CASE("Damaged records fail naming the file and the record", "[tensorboard]") {
  test::TempDir dir("tensorboard_damage");
  fs::path path;
  {
    io::TensorBoardWriter writer(dir.path());
    path = writer.path();
    write_random_events(writer, /*seed=*/3, /*count=*/5);
  }
  const std::string bytes = test::read_bytes(path);
  const size_t records = io::read_tensorboard_events(path).size();
  REQUIRE(records == 6);

  std::string damaged = bytes;
  damaged[3] ^= 0x01;  // the first record's length
  test::write_bytes(dir / "length.tfevents", damaged);
  test::require_error([&] { io::read_tensorboard_events(dir / "length.tfevents"); },
                      {"length.tfevents", "record 0", "CRC of its length"});

  damaged = bytes;
  damaged[bytes.size() - 6] ^= 0x40;  // inside the last record's data
  test::write_bytes(dir / "data.tfevents", damaged);
  test::require_error([&] { io::read_tensorboard_events(dir / "data.tfevents"); },
                      {"data.tfevents", "record 5", "CRC of its data"});

  damaged = bytes;
  damaged[bytes.size() - 1] ^= 0x80;  // the last record's data CRC itself
  test::write_bytes(dir / "crc.tfevents", damaged);
  test::require_error([&] { io::read_tensorboard_events(dir / "crc.tfevents"); },
                      {"crc.tfevents", "record 5"});

  // A record whose CRCs hold but whose Event is not valid protobuf: field 1 (wall_time) with a
  // varint wire type, and a length running past its message.
  for (const std::string& event : {std::string("\x08\x01", 2), std::string("\x2a\x7f\x0a", 3)}) {
    std::string record(8, '\0');
    const uint64_t length = event.size();
    std::memcpy(record.data(), &length, 8);
    const uint32_t length_crc = io::masked_crc32c(record);
    const uint32_t data_crc = io::masked_crc32c(event);
    record.append(reinterpret_cast<const char*>(&length_crc), 4);
    record += event;
    record.append(reinterpret_cast<const char*>(&data_crc), 4);
    test::write_bytes(dir / "proto.tfevents", bytes + record);
    test::require_error([&] { io::read_tensorboard_events(dir / "proto.tfevents"); },
                        {"proto.tfevents", "record 6", "not a valid Event"});
  }

  test::require_error([&] { io::read_tensorboard_events(dir / "absent.tfevents"); },
                      {"absent.tfevents", "cannot open"});
  test::write_bytes(dir / "a_file", "x");
  test::require_error([&] { io::TensorBoardWriter writer(dir / "a_file" / "logs"); }, {"a_file"});
}

TEST_CASE("A last record cut short is ignored, as TensorBoard does", "[tensorboard]") {
  test::TempDir dir("tensorboard_truncated");
  fs::path path;
  std::vector<Written> written;
  {
    io::TensorBoardWriter writer(dir.path());
    path = writer.path();
    written = write_random_events(writer, /*seed=*/99, /*count=*/4);
    writer.add_text("samples", "the record to cut", 17, 1.7e9);
  }
  const std::string bytes = test::read_bytes(path);
  REQUIRE(io::read_tensorboard_events(path).size() == 6);
  // Where the last record starts (each record: u64 length, 4 bytes of CRC, the Event, 4 bytes).
  size_t last_start = 0;
  for (size_t at = 0; at < bytes.size();) {
    uint64_t length;
    std::memcpy(&length, bytes.data() + at, 8);
    last_start = at;
    at += 12 + length + 4;
  }
  for (size_t cut : {last_start + 1, last_start + 11, last_start + 12, last_start + 20,
                     bytes.size() - 4, bytes.size() - 1}) {
    INFO("cut at " << cut << " of " << bytes.size());
    test::write_bytes(dir / "cut.tfevents", bytes.substr(0, cut));
    check_read_back(io::read_tensorboard_events(dir / "cut.tfevents"), written);
  }
  test::write_bytes(dir / "cut.tfevents", bytes.substr(0, last_start));
  check_read_back(io::read_tensorboard_events(dir / "cut.tfevents"), written);
}

TEST_CASE("Writes are flushed once flush_seconds have passed", "[tensorboard]") {
  test::TempDir dir("tensorboard_flush");
  {
    io::TensorBoardWriter writer(dir / "every", {.flush_seconds = 0});
    const auto size = fs::file_size(writer.path());
    CHECK(size > 0);  // the file_version event, flushed by the constructor
    writer.add_scalar("loss", 1.5, 1);
    const auto after_scalar = fs::file_size(writer.path());
    CHECK(after_scalar > size);
    writer.add_text("samples", "hello", 1);
    CHECK(fs::file_size(writer.path()) > after_scalar);
  }
  {
    io::TensorBoardWriter writer(dir / "never", {.flush_seconds = 1e9});
    const auto size = fs::file_size(writer.path());
    writer.add_scalar("loss", 1.5, 1);
    CHECK(fs::file_size(writer.path()) == size);  // still in the stdio buffer
    writer.flush();
    const auto flushed = fs::file_size(writer.path());
    CHECK(flushed > size);
    writer.add_scalar("loss", 1.25, 2);
    writer.close();
    CHECK(fs::file_size(writer.path()) > flushed);
    CHECK(io::read_tensorboard_events(writer.path()).size() == 3);
    test::require_error([&] { writer.add_scalar("loss", 1.0, 3); },
                        {writer.path().filename().string(), "closed"});
  }
  {
    fs::path path;
    {
      io::TensorBoardWriter writer(dir / "destructor", {.flush_seconds = 1e9});
      path = writer.path();
      writer.add_scalar("loss", 0.5, 7);
    }
    const auto events = io::read_tensorboard_events(path);
    REQUIRE(events.size() == 2);
    CHECK(events[1].values[0].simple_value == 0.5f);
  }
}

// The file tests/python/test_tensorboard_events.py reads with the tensorboard package; its
// formulas are repeated there (divisions and additions only, each correctly rounded in both
// languages, then rounded to float32).
TEST_CASE("Fixture for the tensorboard package's reader", "[tensorboard][fixture]") {
  const char* out = std::getenv("RQAT_TB_FIXTURE_DIR");
  if (out == nullptr) {
    SUCCEED("RQAT_TB_FIXTURE_DIR is not set: nothing to write");
    return;
  }
  io::TensorBoardWriter writer(out);
  for (int64_t step = 0; step < 10; ++step) {
    const double s = static_cast<double>(step);
    writer.add_scalar("train/loss", 3.0 / (s + 1.0) + 0.25, step, 1.7e9 + s);
    if (step % 3 == 0) writer.add_scalar("eval/accuracy", (s + 1.0) / 12.0, step, 1.7e9 + s + 0.5);
    if (step == 5)
      writer.add_text("samples",
                      "**Q:** 2+2?\n\n**A:** 4 \xE2\x9C\x93\nna\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC",
                      step, 1.7e9 + s + 0.75);
  }
  writer.add_scalar("eval/accuracy", -0.125, int64_t{1} << 41, 1.7e9 + 100);
  writer.close();
}
