// This machine's host name, as progress files and TensorBoard's event file names record it.
#pragma once

#include <string>

namespace rqat::io {

// gethostname(2), or "" when it fails.
std::string host_name();

}  // namespace rqat::io
