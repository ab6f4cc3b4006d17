# What a test needs that the deps step (`make deps`) installs: missing, it is a failure, not a skip (a skip
# would hide a broken install step). Sourced by lib.sh and mn_lib.sh, after their fail().
# need_cmd CMD PACKAGE: CMD on PATH, from Debian's PACKAGE.
need_cmd() {
  command -v "$1" >/dev/null || fail "no $1 on PATH: the deps step installs Debian's $2 (run 'make deps')"
}
# need_torch_py PYTHON: PYTHON imports torch.distributed with gloo (Debian's python3-torch).
need_torch_py() {
  [ -x "$1" ] || fail "no $1: the deps step installs Debian's python3 and python3-torch (run 'make deps')"
  "$1" -c 'import torch.distributed as d; assert d.is_available() and d.is_gloo_available()' 2>/dev/null ||
    fail "$1 cannot import torch.distributed with gloo: the deps step installs Debian's python3-torch (run 'make deps')"
}
