#!/usr/bin/env bash
# c10d rendezvous state pickles, C vs real torch (agent/rdzv/c10d_state.c, docs/dev/torchrun-internals.md "The state"):
# 1. torch 1.13 (host python) and torch 2.6 (chroot) pickle fresh _RendezvousState objects of every shape
#    (tests/helpers/rdzv_pickle.py gen); build/tests/test_pickle decodes them all, checks the fields and that its
#    re-encoding is byte-identical to torch's (TRUN_REPO points it at the fresh set).
# 2. test_pickle writes its own encodings of C-built states (TRUN_PICKLE_OUT); both torches unpickle them into
#    the real classes, compare every field, and re-pickle the byte-identical ones to the same bytes.
# Exit: 0 pass, 77 skip (reason on the last stderr line), anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_host_torch
bin=$build/tests/test_pickle
[ -x "$bin" ] || fail "$bin is missing; run 'make' first"

# 1. fresh torch pickles, read by C (a scratch repo root holding only the fixtures dir)
mkdir -p "$tmp/repo/tests/fixtures/rdzv" "$tmp/out"
"$host_py" "$repo/tests/helpers/rdzv_pickle.py" gen "$tmp/repo/tests/fixtures/rdzv"
need_chroot
"$repo/scripts/chroot-run.sh" python3 /trun/tests/helpers/rdzv_pickle.py gen "$tmp/repo/tests/fixtures/rdzv"
# The committed fixtures as well (the spec's and the capture's states are inside test_pickle).
TRUN_REPO=$tmp/repo CK_FORK=no "$bin" || fail "test_pickle on fresh torch pickles"
TRUN_REPO=$repo CK_FORK=no TRUN_PICKLE_OUT=$tmp/out "$bin" || fail "test_pickle on the committed fixtures"

# 2. C's pickles, read by torch
ls "$tmp/out"/*.b64 >/dev/null || fail "test_pickle wrote no encodings"
"$host_py" "$repo/tests/helpers/rdzv_pickle.py" check "$tmp/out" || fail "torch 1.13 rejects C's pickles"
chmod -R a+rX "$tmp"
"$repo/scripts/chroot-run.sh" python3 /trun/tests/helpers/rdzv_pickle.py check "$tmp/out" ||
  fail "torch 2.6 rejects C's pickles"
echo "62-rdzv-pickle: ok"
