// TensorBoard event files: the writer training runs log scalars and text through, so that
// `tensorboard --logdir` shows a run while it goes, and a reader for tests and tools. No protobuf
// or TensorFlow library: the few messages are encoded by hand (tensorboard/compat/proto/*.proto).
//
// What TensorBoard needs, and what this writes:
//   - a file in the log directory whose name contains "tfevents"; like TensorBoard's own writer
//     (summary/writer/event_file_writer.py) it is
//     events.out.tfevents.<unix seconds, 10 digits>.<hostname>.<pid>.<counter in this process>;
//   - TFRecord framing of every record (record_writer.py): u64 length, masked CRC32C of those 8
//     bytes, the bytes, masked CRC32C of the bytes (little-endian);
//   - first an Event{wall_time, file_version = "brain.Event:2"} (version 2 makes TensorBoard detect
//     restarts by SessionLog rather than by a step going back, which would drop data);
//   - then one Event{wall_time, step, Summary{Value}} per scalar or text;
//   - a scalar as Value.simple_value, a float32: TensorBoard's own writers store scalars that way,
//     so a double logged here reads back rounded to the nearest float (past float's range: inf);
//   - a text as the text plugin's Value: a DT_STRING tensor of shape [] holding the markdown, with
//     SummaryMetadata.plugin_data.plugin_name = "text" (plugins/text/metadata.py).
// Fields are written in field-number order and proto3 defaults (step 0) left out, so each record is
// byte for byte what Python's protobuf serializes for the same message.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rqat::io {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`, the checksum of TFRecords.
uint32_t crc32c(std::string_view data);
// TensorFlow's masked CRC, ((crc >> 15) | (crc << 17)) + 0xa282ead8: what a record stores, so that
// a CRC of bytes that themselves contain CRCs does not degenerate.
uint32_t masked_crc32c(std::string_view data);

// Seconds since the Unix epoch, with fraction: an Event's wall_time.
double unix_seconds_now();

struct TensorBoardWriterOptions {
  // A write flushes the file when at least this many seconds have passed since the last flush
  // (0: every write is flushed). TensorBoard reads only what has reached the file.
  double flush_seconds = 30;
};

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it, whose first record is the
  // file_version event (flushed at once, so TensorBoard lists the run right away).
  explicit TensorBoardWriter(const std::filesystem::path& dir,
                             TensorBoardWriterOptions options = {});
  TensorBoardWriter(TensorBoardWriter&&) noexcept = default;
  TensorBoardWriter& operator=(TensorBoardWriter&&) noexcept = default;
  ~TensorBoardWriter() = default;  // closes the file, flushing it (errors then go unreported)

  // `value` is stored as a float32 (see the top of this file).
  void add_scalar(std::string_view tag, double value, int64_t step,
                  double wall_time = unix_seconds_now());
  // `markdown` (UTF-8) as the text plugin shows it.
  void add_text(std::string_view tag, std::string_view markdown, int64_t step,
                double wall_time = unix_seconds_now());
  void flush();
  // Flushes and closes the file, reporting errors (the destructor cannot); later writes fail.
  void close();

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_event(const std::string& event);

  struct FileCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };
  std::filesystem::path path_;
  TensorBoardWriterOptions options_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  double last_flush_ = 0;  // steady-clock seconds
};

// An event file read back. A value holds what rqat writes: a simple_value, or the text of a
// DT_STRING tensor; other kinds of values (images, histograms, other tensors) keep only their tag.
struct TensorBoardValue {
  std::string tag;
  std::string plugin_name;  // SummaryMetadata.plugin_data.plugin_name, "" when absent
  std::optional<float> simple_value;
  std::optional<std::string> text;  // string_val[0] of a DT_STRING tensor with one string
};

struct TensorBoardEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::vector<TensorBoardValue> values;  // the Summary's, empty for other events
};

// Every event of an event file, in order. Both CRCs of every record are checked, and a mismatch or
// a malformed Event fails naming the file and the record's index. A last record cut short (a
// writer killed mid-write, or one still writing) is ignored, as TensorBoard does; records before it
// are returned.
std::vector<TensorBoardEvent> read_tensorboard_events(const std::filesystem::path& path);

}  // namespace rqat::io
