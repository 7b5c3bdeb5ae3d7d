# Sourced by the scripts that read benchmark programs' "RESULT key=value ..." lines (gpu-check,
# gpu-e2e, bench_generate). Defines functions only.

# result KEY FILE: the value of KEY on the first RESULT line of FILE ("-": standard input) that has
# it; nothing when none has.
result() { sed -n "s/^RESULT .*\b$1=\([^ ]*\).*/\1/p" "$2" | head -1; }
