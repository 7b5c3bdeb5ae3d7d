// safetensors header and data: any file either opens with every tensor inside the data section,
// its byte count equal to dtype x shape, or is refused with rqat::Error.
#include <ATen/ATen.h>

#include <cstring>

#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rqat;
  const auto path = fuzz::scratch_file("model.safetensors", fuzz::as_text(data, size));
  fuzz::expect_clean_failure([&] {
    const auto file = io::SafetensorsFile::open(path);
    uint64_t header_len = 0;  // open() succeeded, so the file has these 8 bytes
    std::memcpy(&header_len, data, sizeof(header_len));
    const uint64_t data_size = file->file_size() - 8 - header_len;
    for (const auto& entry : file->entries()) {
      fuzz::require(entry.begin <= entry.end && entry.end <= data_size, "tensor inside the data");
      const at::Tensor t = file->tensor(entry.name);
      fuzz::require(static_cast<uint64_t>(t.nbytes()) == entry.end - entry.begin,
                    "tensor bytes == data range");
      // Touch every byte: a view outside the mapping faults here.
      if (t.numel() > 0) (void)at::sum(t.view(at::kByte).to(at::kInt)).item<int64_t>();
    }
  });
  return 0;
}
