// See tensorboard_events.h. The messages, with their field numbers (tensorboard/compat/proto):
//   Event            { double wall_time = 1; int64 step = 2;
//                      oneof { string file_version = 3; Summary summary = 5; ... } }
//   Summary          { repeated Value value = 1; }
//   Summary.Value    { string tag = 1; oneof { float simple_value = 2; TensorProto tensor = 8; ...}
//                      SummaryMetadata metadata = 9; }
//   SummaryMetadata  { PluginData plugin_data = 1; }  PluginData { string plugin_name = 1; ... }
//   TensorProto      { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2;
//                      repeated bytes string_val = 8; }
//   TensorShapeProto { repeated Dim dim = 2; }  (no dims: shape [])
// Protobuf's wire format: each field is a varint key (number << 3 | wire type) and a value: a
// varint (0), 8 little-endian bytes (1), a varint length and that many bytes (2) or 4 bytes (5).
#include "io/tensorboard_events.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "io/error.h"
#include "io/host_name.h"

namespace rqat::io {

namespace {

static_assert(std::endian::native == std::endian::little, "event files are little-endian");

constexpr std::array<uint32_t, 256> kCrc32cTable = [] {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
    table[byte] = crc;
  }
  return table;
}();

constexpr std::string_view kFileVersion = "brain.Event:2";
constexpr std::string_view kTextPluginName = "text";
constexpr uint64_t kDtString = 7;          // types.proto DataType
constexpr size_t kRecordHeaderBytes = 12;  // u64 length, u32 masked CRC of it
constexpr size_t kRecordFooterBytes = 4;   // u32 masked CRC of the data

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// --- Encoding.

template <class T>
void put_fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, uint32_t field, WireType wire) {
  put_varint(out, (uint64_t{field} << 3) | wire);
}

// Always written: a message field that is set, or an element of a repeated field.
void put_length_delimited(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// A proto3 string without presence: left out when empty, as protobuf does.
void put_string(std::string& out, uint32_t field, std::string_view text) {
  if (!text.empty()) put_length_delimited(out, field, text);
}

std::string event_message(double wall_time, int64_t step) {
  std::string event;
  if (std::bit_cast<uint64_t>(wall_time) != 0) {
    put_key(event, 1, kFixed64);
    put_fixed(event, wall_time);
  }
  if (step != 0) {
    put_key(event, 2, kVarint);
    put_varint(event, static_cast<uint64_t>(step));  // negative: ten bytes, two's complement
  }
  return event;
}

std::string summary_event(double wall_time, int64_t step, const std::string& value) {
  std::string summary;
  put_length_delimited(summary, 1, value);
  std::string event = event_message(wall_time, step);
  put_length_delimited(event, 5, summary);
  return event;
}

// TFRecord framing of one record.
std::string tfrecord(std::string_view data) {
  std::string record;
  record.reserve(kRecordHeaderBytes + data.size() + kRecordFooterBytes);
  put_fixed<uint64_t>(record, data.size());
  put_fixed<uint32_t>(record, masked_crc32c(record));
  record.append(data);
  put_fixed<uint32_t>(record, masked_crc32c(data));
  return record;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string event_file_name() {
  static std::atomic<int> counter{0};
  std::string host = host_name();
  if (host.empty()) host = "localhost";
  char name[512];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d.%d",
                static_cast<long long>(std::time(nullptr)), host.c_str(),
                static_cast<int>(::getpid()), counter++);
  return name;
}

// --- Decoding.

template <class T>
T load_fixed(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

struct WireField {
  uint32_t number = 0;
  WireType wire = kVarint;
  uint64_t number_value = 0;  // a varint, or the bits of a fixed64 / fixed32
  std::string_view bytes;     // a length-delimited value
};

// The fields of one message in turn, and their values as the .proto types them: a field this
// decoder knows with another wire type, or bytes that are not protobuf, fail naming `where` (file
// and record) and the message.
class FieldReader {
 public:
  FieldReader(std::string_view bytes, std::string_view message, const std::string& where)
      : rest_(bytes), message_(message), where_(where) {}

  bool next(WireField& field) {
    if (rest_.empty()) return false;
    const uint64_t key = varint();
    if ((key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF) malformed("a field number out of range");
    field.number = static_cast<uint32_t>(key >> 3);
    field.wire = static_cast<WireType>(key & 7);
    switch (field.wire) {
      case kVarint:
        field.number_value = varint();
        break;
      case kFixed64:
        field.number_value = fixed<uint64_t>();
        break;
      case kFixed32:
        field.number_value = fixed<uint32_t>();
        break;
      case kLengthDelimited: {
        const uint64_t length = varint();
        if (length > rest_.size()) malformed("a length past the end of its message");
        field.bytes = rest_.substr(0, length);
        rest_.remove_prefix(length);
        break;
      }
      default:
        malformed(fmt::format("wire type {} (groups are not used by these messages)", key & 7));
    }
    return true;
  }

  std::string_view bytes(const WireField& field) const {
    expect(field, kLengthDelimited);
    return field.bytes;
  }
  uint64_t varint(const WireField& field) const {
    expect(field, kVarint);
    return field.number_value;
  }
  double float64(const WireField& field) const {
    expect(field, kFixed64);
    return std::bit_cast<double>(field.number_value);
  }
  float float32(const WireField& field) const {
    expect(field, kFixed32);
    return std::bit_cast<float>(static_cast<uint32_t>(field.number_value));
  }
  // A nested message's fields.
  FieldReader message(const WireField& field, std::string_view name) const {
    return FieldReader(bytes(field), name, where_);
  }

 private:
  void expect(const WireField& field, WireType wire) const {
    if (field.wire != wire)
      malformed(fmt::format("field {} has wire type {}, not {}", field.number,
                            static_cast<uint32_t>(field.wire), static_cast<uint32_t>(wire)));
  }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (rest_.empty()) malformed("a varint cut short");
      const auto byte = static_cast<uint8_t>(rest_.front());
      rest_.remove_prefix(1);
      value |= uint64_t{byte & 0x7Fu} << shift;
      if (!(byte & 0x80)) return value;
    }
    malformed("a varint longer than ten bytes");
  }

  template <class T>
  T fixed() {
    if (rest_.size() < sizeof(T)) malformed("a fixed-size value cut short");
    const T value = load_fixed<T>(rest_.data());
    rest_.remove_prefix(sizeof(T));
    return value;
  }

  [[noreturn]] void malformed(std::string_view what) const {
    fail("{}: not a valid Event message ({}: {})", where_, message_, what);
  }

  std::string_view rest_;
  std::string_view message_;
  const std::string& where_;
};

std::string decode_plugin_name(FieldReader metadata) {
  std::string plugin_name;
  for (WireField field; metadata.next(field);) {
    if (field.number != 1) continue;
    FieldReader plugin_data = metadata.message(field, "PluginData");
    for (WireField data_field; plugin_data.next(data_field);)
      if (data_field.number == 1) plugin_name = plugin_data.bytes(data_field);
  }
  return plugin_name;
}

// The text of a DT_STRING tensor holding one string; nullopt for any other tensor.
std::optional<std::string> decode_text(FieldReader tensor) {
  uint64_t dtype = 0;
  std::vector<std::string_view> strings;
  for (WireField field; tensor.next(field);) {
    if (field.number == 1) dtype = tensor.varint(field);
    if (field.number == 8) strings.push_back(tensor.bytes(field));
  }
  if (dtype != kDtString || strings.size() != 1) return std::nullopt;
  return std::string(strings[0]);
}

// Fields of other kinds of values (images, histograms) are skipped.
TensorBoardValue decode_value(FieldReader fields) {
  TensorBoardValue value;
  for (WireField field; fields.next(field);) {
    if (field.number == 1) value.tag = fields.bytes(field);
    if (field.number == 2) value.simple_value = fields.float32(field);
    if (field.number == 8) value.text = decode_text(fields.message(field, "TensorProto"));
    if (field.number == 9)
      value.plugin_name = decode_plugin_name(fields.message(field, "SummaryMetadata"));
  }
  return value;
}

// Fields of other events (graphs, session logs, source metadata) are skipped.
TensorBoardEvent decode_event(std::string_view bytes, const std::string& where) {
  TensorBoardEvent event;
  FieldReader fields(bytes, "Event", where);
  for (WireField field; fields.next(field);) {
    if (field.number == 1) event.wall_time = fields.float64(field);
    if (field.number == 2) event.step = static_cast<int64_t>(fields.varint(field));
    if (field.number == 3) event.file_version = std::string(fields.bytes(field));
    if (field.number != 5) continue;
    FieldReader summary = fields.message(field, "Summary");
    for (WireField value; summary.next(value);)
      if (value.number == 1) event.values.push_back(decode_value(summary.message(value, "Value")));
  }
  return event;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const char c : data) crc = kCrc32cTable[(crc ^ static_cast<uint8_t>(c)) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir,
                                     TensorBoardWriterOptions options)
    : options_(options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the TensorBoard log directory: {}", dir.string(), ec.message());
  path_ = dir / event_file_name();
  file_.reset(std::fopen(path_.c_str(), "ab"));
  if (!file_) fail("{}: cannot create: {}", path_.string(), std::strerror(errno));
  std::string event = event_message(unix_seconds_now(), /*step=*/0);
  put_length_delimited(event, 3, kFileVersion);
  write_event(event);
  flush();
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, int64_t step,
                                   double wall_time) {
  std::string message;
  put_string(message, 1, tag);
  put_key(message, 2, kFixed32);
  put_fixed(message, static_cast<float>(value));
  write_event(summary_event(wall_time, step, message));
}

void TensorBoardWriter::add_text(std::string_view tag, std::string_view markdown, int64_t step,
                                 double wall_time) {
  std::string tensor;
  put_key(tensor, 1, kVarint);
  put_varint(tensor, kDtString);
  put_length_delimited(tensor, 2, "");  // TensorShapeProto without dims: shape []
  put_length_delimited(tensor, 8, markdown);
  std::string plugin_data;
  put_string(plugin_data, 1, kTextPluginName);  // content: TextPluginData{version 0}, empty
  std::string metadata;
  put_length_delimited(metadata, 1, plugin_data);
  std::string message;
  put_string(message, 1, tag);
  put_length_delimited(message, 8, tensor);
  put_length_delimited(message, 9, metadata);
  write_event(summary_event(wall_time, step, message));
}

void TensorBoardWriter::write_event(const std::string& event) {
  if (!file_) fail("{}: written to after it was closed", path_.string());
  const std::string record = tfrecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size())
    fail("{}: cannot write TensorBoard events: {}", path_.string(), std::strerror(errno));
  if (steady_seconds() - last_flush_ >= options_.flush_seconds) flush();
}

void TensorBoardWriter::flush() {
  if (!file_) fail("{}: flushed after it was closed", path_.string());
  if (std::fflush(file_.get()) != 0)
    fail("{}: cannot write TensorBoard events: {}", path_.string(), std::strerror(errno));
  last_flush_ = steady_seconds();
}

void TensorBoardWriter::close() {
  if (!file_) return;
  flush();
  if (std::fclose(file_.release()) != 0)
    fail("{}: cannot close TensorBoard events: {}", path_.string(), std::strerror(errno));
}

std::vector<TensorBoardEvent> read_tensorboard_events(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open (missing or unreadable)", path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("{}: read failed", path.string());
  const std::string bytes = std::move(buffer).str();

  std::vector<TensorBoardEvent> events;
  size_t at = 0;
  for (size_t index = 0; at < bytes.size(); ++index) {
    const size_t left = bytes.size() - at;
    if (left < kRecordHeaderBytes) break;  // the last record cut short: ignored
    const std::string where = fmt::format("{}: record {}", path.string(), index);
    const std::string_view length_bytes(bytes.data() + at, sizeof(uint64_t));
    if (load_fixed<uint32_t>(bytes.data() + at + 8) != masked_crc32c(length_bytes))
      fail("{}: the CRC of its length does not match (a damaged event file)", where);
    const uint64_t length = load_fixed<uint64_t>(bytes.data() + at);
    const size_t after_header = left - kRecordHeaderBytes;
    if (after_header < kRecordFooterBytes || length > after_header - kRecordFooterBytes)
      break;  // the last record cut short: ignored
    const std::string_view data(bytes.data() + at + kRecordHeaderBytes, length);
    if (load_fixed<uint32_t>(bytes.data() + at + kRecordHeaderBytes + length) !=
        masked_crc32c(data))
      fail("{}: the CRC of its data does not match (a damaged event file)", where);
    events.push_back(decode_event(data, where));
    at += kRecordHeaderBytes + length + kRecordFooterBytes;
  }
  return events;
}

}  // namespace rqat::io
