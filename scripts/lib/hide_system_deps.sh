# Sourced by scripts/test-gpu-bundle and scripts/test-no-root: a bubblewrap sandbox in which the
# Debian packages that scripts/gpu-bundle replaces are hidden, as on a machine that lacks them.
# Defines a function only.

# hide_system_deps WORK: fills the arrays
#   sandbox        bwrap ... : directories that belong to these packages (or only hold CMake and
#                  pkg-config files) get an empty tmpfs; single files in shared directories get
#                  WORK/empty bound over them, so that a stray use fails loudly;
#   sandbox_tools  the same, but PCRE2's library files stay (grep, mkdir, ... load libpcre2-8.so.0;
#                  the header stays hidden);
#   hidden         what is hidden, for the report;
#   hidden_probes  files that must not be readable inside.
# Libraries that the machine's own tools load (libcurl, libssl, ... for cmake) stay: an ldd check of
# the caller's proves that rqat's programs take the bundle's copies.
hide_system_deps() {
  local work=$1 multiarch lib d f
  multiarch=$(gcc -print-multiarch)
  lib=/usr/lib/$multiarch
  local hide_dirs=(/usr/include/{fmt,yaml-cpp,CLI,catch2,nlohmann,gloo,boost,hdf5} "$lib/hdf5" "$lib/cmake"
                   /usr/lib/cmake /usr/share/cmake "$lib/pkgconfig" /usr/share/pkgconfig /usr/lib/pkgconfig
                   /usr/share/Catch2)
  local hide_files=(/usr/include/{pcre2,pcre2posix,utf8proc}.h
                    "$lib"/lib{fmt,yaml-cpp,hdf5,pcre2-8,pcre2-posix,utf8proc,sz,aec}[._]*
                    /usr/lib/libCatch2WithMain.a /usr/bin/h5cc /usr/bin/h5c++ /usr/bin/h5fc)
  : >"$work/empty"
  sandbox=(bwrap --bind / / --dev /dev --proc /proc --die-with-parent)
  sandbox_tools=("${sandbox[@]}")
  hidden=()
  for d in "${hide_dirs[@]}"; do
    [ -d "$d" ] || continue
    sandbox+=(--tmpfs "$d") sandbox_tools+=(--tmpfs "$d") hidden+=("$d/")
  done
  for f in "${hide_files[@]}"; do
    [ -e "$f" ] || continue
    sandbox+=(--ro-bind "$work/empty" "$f") hidden+=("$f")
    [[ $f == */libpcre2* ]] || sandbox_tools+=(--ro-bind "$work/empty" "$f")
  done
  hidden_probes=(/usr/include/fmt/core.h /usr/include/yaml-cpp/yaml.h /usr/include/CLI/CLI.hpp
                 /usr/include/catch2/catch.hpp /usr/include/nlohmann/json.hpp /usr/include/gloo/config.h
                 /usr/include/boost/version.hpp /usr/include/hdf5/serial/hdf5.h /usr/include/pcre2.h
                 /usr/include/utf8proc.h "$lib/libfmt.so" "$lib/libyaml-cpp.so" "$lib/hdf5/serial/libhdf5.so"
                 "$lib/libpcre2-8.so" "$lib/libutf8proc.so" "$lib/cmake/fmt/fmt-config.cmake"
                 /usr/lib/cmake/Catch2/Catch2Config.cmake /usr/share/cmake/CLI11/CLI11Config.cmake
                 "$lib/pkgconfig/libpcre2-8.pc" /usr/bin/h5cc)
}
