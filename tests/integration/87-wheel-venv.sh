#!/usr/bin/env bash
# runner: lock=dist
# make wheel: dist/trun-VERSION-py3-none-manylinux_2_31_x86_64.whl, installed with pip into a venv in the
# torch 2.6 trixie root (a throwaway overlay of it, scripts/root-run.sh; python3-venv installed there by
# apt, its .debs cached in /var/cache/trun/apt-archives/trixie so that later runs need no mirror):
#  1. python3 -m venv --system-site-packages V && V/bin/pip install --no-index the wheel: V/bin gets the four
#     programs (the release binaries, byte for byte), V/share/man/man1 their man pages, site-packages the
#     trun package; nothing else is added.
#  2. V/bin/trun --standalone --nproc-per-node 2 examples/allreduce.py passes, and, with V not activated
#     (python3 on PATH is /usr/bin/python3), the workers run V's python3 (sys.prefix = V).
#  3. V/bin/python -m trun ... the same, the workers running V/bin/python (PYTHON_EXEC = sys.executable).
#  4. V/bin/pip uninstall -y trun removes every file it added.
# Exit: 0 pass, anything else fail.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../helpers/lib.sh"
need_chroot
version=$(cat "$repo/VERSION")
wheel=$repo/dist/trun-$version-py3-none-manylinux_2_31_x86_64.whl
debs=/var/cache/trun/apt-archives/trixie

echo "== make wheel"
make -C "$repo" --no-print-directory B="$build" wheel >"$tmp/wheel.log" 2>&1 || { tail -n 40 "$tmp/wheel.log"; fail "make wheel failed"; }
[ -f "$wheel" ] || fail "make wheel did not write $wheel"
echo "ok: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"
mkdir -p "$tmp/rel" "$debs/partial"
tar -C "$tmp/rel" -xzf "$repo/dist/trun-$version-linux-x86_64.tar.gz"

cat >"$tmp/inner.sh" <<'INNER'
set -euo pipefail
export USE_LIBUV=0 # Debian's torch 2.6 has no libuv TCPStore (scripts/chroot-patch-torch.py)
apt() { apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends python3-venv >/t/apt.log 2>&1; }
apt || { apt-get -qq update >>/t/apt.log 2>&1 && apt; } || { cat /t/apt.log; echo "inner: cannot install python3-venv"; exit 3; }
snap() { (cd /opt/V && find . ! -type d | LC_ALL=C sort >"/t/$1.files" && find . -type d | LC_ALL=C sort >"/t/$1.dirs"); }
echo '$ python3 -m venv --system-site-packages /opt/V'
python3 -m venv --system-site-packages /opt/V
snap before
echo "\$ /opt/V/bin/pip install --no-index /trun/dist/$WHEEL"
/opt/V/bin/pip install --no-index "/trun/dist/$WHEEL" >/t/pip-install.log 2>&1 || { cat /t/pip-install.log; exit 4; }
tail -n 1 /t/pip-install.log
snap installed
cp /opt/V/bin/trun /opt/V/bin/trun-store /opt/V/bin/trun-topo /opt/V/bin/trun-preflight /t/
command -v python3 >/t/path-python3
echo '$ /opt/V/bin/trun --version'
/opt/V/bin/trun --version | tee /t/version
cat >/opt/prefix.py <<'PY'
import os, sys
with open(os.path.join(sys.argv[1], "w" + os.environ["RANK"]), "w") as f:
    f.write(f"{sys.prefix} {sys.executable}\n")
PY
mkdir -p /t/p1 /t/p2
cd /opt
echo "\$ /opt/V/bin/trun --standalone --nproc-per-node 2 /trun/examples/allreduce.py    # python3 on PATH: $(command -v python3)"
/opt/V/bin/trun --standalone --nproc-per-node 2 /trun/examples/allreduce.py >/t/run1.out 2>&1 || { cat /t/run1.out; exit 5; }
grep '^rank' /t/run1.out | sort
/opt/V/bin/trun --standalone --nproc-per-node 2 /opt/prefix.py /t/p1 >/t/p1.out 2>&1 || { cat /t/p1.out; exit 5; }
echo '$ /opt/V/bin/python -m trun --standalone --nproc-per-node 2 /trun/examples/allreduce.py'
/opt/V/bin/python -m trun --standalone --nproc-per-node 2 /trun/examples/allreduce.py >/t/run2.out 2>&1 || { cat /t/run2.out; exit 6; }
grep '^rank' /t/run2.out | sort
/opt/V/bin/python -m trun --standalone --nproc-per-node 2 /opt/prefix.py /t/p2 >/t/p2.out 2>&1 || { cat /t/p2.out; exit 6; }
/opt/V/bin/python -m trun --version >/t/version2
echo '$ /opt/V/bin/pip uninstall -y trun'
/opt/V/bin/pip uninstall -y trun >/t/pip-uninstall.log 2>&1 || { cat /t/pip-uninstall.log; exit 7; }
tail -n 1 /t/pip-uninstall.log
snap after
INNER

echo "== pip install, two 2-worker jobs each way, pip uninstall (trixie root, torch 2.6)"
run_pg "$repo/scripts/root-run.sh" --hostname trixie-venv --bind "$repo:/trun" --bind "$tmp:/t" \
  --bind "$debs:/var/cache/apt/archives" "$chroot_dir" /usr/bin/env WHEEL="$(basename "$wheel")" \
  /bin/bash /t/inner.sh >"$tmp/inner.out" 2>&1 || { cat "$tmp/inner.out"; fail "the venv steps failed (exit $?, output above)"; }
sed 's/^/    /' "$tmp/inner.out"

echo "== 1. what pip installed"
LC_ALL=C comm -13 "$tmp/before.files" "$tmp/installed.files" | grep -v '/__pycache__/' >"$tmp/added"
{
  printf './bin/%s\n' trun trun-store trun-topo trun-preflight
  printf './share/man/man1/%s.1.gz\n' trun trun-store trun-topo trun-preflight
} | LC_ALL=C sort >"$tmp/want-outside"
grep -v '/site-packages/' "$tmp/added" | LC_ALL=C sort | diff -u "$tmp/want-outside" - || fail "pip put unexpected files outside site-packages"
grep '/site-packages/' "$tmp/added" | sed 's,.*/site-packages/,,' | LC_ALL=C sort >"$tmp/added-sp"
printf '%s\n' trun/__init__.py trun/__main__.py "trun-$version.dist-info/"{INSTALLER,LICENSE,METADATA,RECORD,REQUESTED,WHEEL,direct_url.json,top_level.txt} \
  "trun-$version.dist-info/third-party/"{libuv,jansson,libyaml}.copyright |
  LC_ALL=C sort | diff -u - "$tmp/added-sp" || fail "pip put unexpected files in site-packages"
for p in trun trun-store trun-topo trun-preflight; do
  cmp "$tmp/$p" "$tmp/rel/trun-$version-linux-x86_64/bin/$p" || fail "V/bin/$p is not the release binary"
done
grep -q "^trun $version" "$tmp/version" || fail "V/bin/trun --version: $(cat "$tmp/version")"
grep -q "^trun $version" "$tmp/version2" || fail "python -m trun --version: $(cat "$tmp/version2")"
echo "ok: V/bin/{trun,trun-store,trun-topo,trun-preflight} = the release binaries, man pages, the trun package"

echo "== 2./3. the jobs and the workers' Python"
[ "$(cat "$tmp/path-python3")" = /usr/bin/python3 ] || fail "python3 on PATH in the root is $(cat "$tmp/path-python3"), want /usr/bin/python3"
for run in run1 run2; do
  for r in 0 1; do grep -q "rank $r/2 .*OK" "$tmp/$run.out" || fail "$run: rank $r did not report a correct all-reduce"; done
done
for r in 0 1; do
  [ "$(cat "$tmp/p1/w$r")" = "/opt/V /opt/V/bin/python3" ] || fail "V/bin/trun: worker $r ran '$(cat "$tmp/p1/w$r")', want V's python3"
  [ "$(cat "$tmp/p2/w$r")" = "/opt/V /opt/V/bin/python" ] || fail "python -m trun: worker $r ran '$(cat "$tmp/p2/w$r")', want V/bin/python"
done
echo "    workers' sys.prefix sys.executable: V/bin/trun: $(cat "$tmp/p1/w0"); python -m trun: $(cat "$tmp/p2/w0")"
echo "ok: V/bin/trun -> workers on /opt/V/bin/python3; V/bin/python -m trun -> workers on /opt/V/bin/python"

echo "== 4. pip uninstall"
diff -u "$tmp/before.files" "$tmp/after.files" || fail "pip uninstall left files (or removed others)"
extra=$(LC_ALL=C comm -13 "$tmp/before.dirs" "$tmp/after.dirs" | tr '\n' ' ')
echo "ok: every file pip added is gone${extra:+ (empty directories pip keeps: $extra)}"
echo PASS
