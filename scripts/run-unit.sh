#!/usr/bin/env bash
# Runs Check unit-test binaries; prints each one's summary and a total line. Exit 1 if any failed.
set -u
fail=0
for t in "$@"; do
  if ! CK_VERBOSITY=${CK_VERBOSITY:-normal} "$t"; then
    echo "unit: FAILED $t" >&2
    fail=1
  fi
done
exit $fail
