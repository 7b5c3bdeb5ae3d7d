# Sourced by the shell tests of the tools' command lines: a failure counter and the check that a
# command fails with one line on stderr.
#   expect_rc       the exit status required (default: any non-zero)
#   expect_timeout  seconds before the command counts as hung (default 300)
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_error NEEDLE CMD...: CMD fails as above, with one line on stderr containing NEEDLE.
expect_error() {
  local needle=$1
  shift
  local err rc
  err=$(timeout -k 5 "${expect_timeout:-300}" "$@" 2>&1 >/dev/null)
  rc=$?
  local wrong_rc=0
  if [ -n "${expect_rc:-}" ]; then [ "$rc" -eq "$expect_rc" ] || wrong_rc=1
  else [ "$rc" -ne 0 ] || wrong_rc=1; fi
  if [ $wrong_rc -eq 1 ] || [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ] || [[ "$err" != *"$needle"* ]]; then
    fail "$* -> rc=$rc${expect_rc:+ (want $expect_rc)}, stderr: ${err:0:400}"
  else
    echo "ok${expect_rc:+ (exit $expect_rc)}: ${err:0:200}"
  fi
}
