# Sourced by scripts/setup (--bundle) and scripts/gpu-check (--bundle): the dependency bundle that
# scripts/gpu-bundle makes, unpacked and checked against this machine. Defines functions only.

# bundle_deps_dir BUNDLE DEST PYTHON: prints the directory that holds rqat-deps.cmake. BUNDLE is a
# bundle (deps.tar.xz + wheels/) or an already unpacked deps/ directory; a deps.tar.xz is unpacked
# into DEST/deps with PYTHON's tarfile (xz(1) is often missing from CUDA images and login nodes,
# Python's lzma module rarely), and not again while DEST/deps/.bundle-sha256 matches the archive.
# Returns 1 with a one-line message on stderr when BUNDLE is neither.
bundle_deps_dir() {
  local bundle=$1 dest=$2 python=$3 sum
  [ -d "$bundle" ] || { echo "bundle $bundle is not a directory" >&2; return 1; }
  bundle=$(cd "$bundle" && pwd)
  if [ -f "$bundle/rqat-deps.cmake" ]; then
    echo "$bundle"
    return 0
  fi
  if [ ! -f "$bundle/deps.tar.xz" ]; then
    echo "bundle $bundle holds neither deps.tar.xz nor rqat-deps.cmake (make it with scripts/gpu-bundle)" >&2
    return 1
  fi
  sum=$(sha256sum "$bundle/deps.tar.xz" | cut -d' ' -f1)
  if [ "$(cat "$dest/deps/.bundle-sha256" 2>/dev/null)" != "$sum" ]; then
    rm -rf "$dest/deps"
    mkdir -p "$dest"
    "$python" - "$bundle/deps.tar.xz" "$dest" <<'PY' || { echo "cannot unpack $bundle/deps.tar.xz" >&2; return 1; }
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    t.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
PY
    echo "$sum" >"$dest/deps/.bundle-sha256"
  fi
  (cd "$dest/deps" && pwd)
}

# bundle_compat_problems DEPS: prints one line per thing this machine lacks that the bundled
# libraries need (their MANIFEST names the newest glibc and libstdc++ symbol versions); nothing
# when it has them all.
bundle_compat_problems() {
  local deps=$1 need_glibc have_glibc need_glibcxx libstdcxx
  read -r need_glibc have_glibc <<<"$(bundle_glibc_versions "$deps")"
  if [ "$need_glibc" != "?" ] && [ "$have_glibc" != "?" ] &&
     [ "$(printf '%s\n' "$need_glibc" "$have_glibc" | sort -V | head -1)" != "$need_glibc" ]; then
    echo "glibc $have_glibc here, the bundled libraries need $need_glibc"
  fi
  # The libstdc++ the compiler links (and the loader finds) must know the newest symbol version the
  # bundled C++ libraries use.
  need_glibcxx=$(sed -n 's/.*with \(GLIBCXX_[0-9.]*\).*/\1/p' "$deps/MANIFEST.txt" 2>/dev/null | head -1)
  libstdcxx=$(c++ -print-file-name=libstdc++.so.6 2>/dev/null || true)
  if [ -n "$need_glibcxx" ] && [ -f "$libstdcxx" ] && ! grep -aq "$need_glibcxx" "$libstdcxx"; then
    echo "$libstdcxx lacks $need_glibcxx, which the bundled libraries need (GCC >= 11)"
  fi
  return 0
}

# bundle_glibc_versions DEPS: "NEED HAVE", the glibc the bundled libraries need (their MANIFEST)
# and the one here, each "?" when unknown.
bundle_glibc_versions() {
  local need have
  need=$(sed -n 's/.*glibc >= \([0-9.]*\).*/\1/p' "$1/MANIFEST.txt" 2>/dev/null | head -1)
  have=$(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$' || true)
  echo "${need:-?} ${have:-?}"
}

# bundle_glibc_line DEPS: "glibc HAVE >= NEED" for a report.
bundle_glibc_line() {
  local need have
  read -r need have <<<"$(bundle_glibc_versions "$1")"
  echo "glibc $have >= $need"
}
