#!/usr/bin/env bash
# `trun-topo health` (tools/topo_health.c, agent/discover/health.c) against the node fixtures
# (tests/fixtures/nodes/, gen.py there) with the fake NVML (build/libnvidia-ml-fake.so and its fault
# injection) and /dev/shm as a tmpfs of a chosen size in a private mount namespace (unshare -m):
#  1. every fixture, --json --no-imds, /dev/shm 2 GiB: all 12 checks listed in order, each with status, value,
#     threshold, reason and source; elapsed_ms; each check's status as this table expects (the healthy p4d
#     passes all but retired-pages, which A100s do not support; p4d-faulty fails every check it has a fault
#     for, PCIe warns; GPU-less and NVML-less nodes skip the GPU checks and say why); exit 0, or 3 where a
#     check failed.
#  2. /dev/shm of 64 MiB: shm warns with the fix; the table form names the check and ends with the verdict.
#  3. An older driver (the fake NVML lacks the calls): the GPU checks skip with "lacks", exit 0.
#  4. --checks: a list runs exactly those checks; a name that is no check, an empty list, an unknown option
#     exit 2 with one line naming the cause.
# Exit: 0 pass, anything else fail.
set -euo pipefail
repo=${TRUN_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${TRUN_BUILD:-$repo/build}
topo=$build/trun-topo
shim=$build/libnvidia-ml-fake.so
cudart=$build/libcuda-nccl-fake.so
fx=$repo/tests/fixtures/nodes
tmp=$(mktemp -d /tmp/trun-69.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$topo" ] || fail "$topo is missing; run 'make' first"
[ -f "$shim" ] || fail "$shim is missing; run 'make' first"
command -v unshare >/dev/null || fail "unshare (util-linux) is missing"
mkdir -p "$tmp/shm"

# run SHM_SIZE FIXTURE [NVML_JSON] -- ARGS...: trun-topo health in the fixture's environment with a tmpfs of
# SHM_SIZE as its /dev/shm (TRUN_SHM_PATH); stdout/stderr to $tmp/o, $tmp/e; exit code in $rc.
run() {
  local size=$1 d=$fx/$2 topo_json=$fx/$2/nvml.json lib=/nonexistent/libnvidia-ml.so.1 rt=/nonexistent/libcudart.so
  shift 2
  if [ "$1" != -- ]; then topo_json=$1; shift; fi
  shift
  [ -f "$d/nvml.json" ] && lib=$shim
  [ -f "$d/cudart.json" ] && rt=$cudart
  local -a vars=()
  [ -s "$d/env" ] && mapfile -t vars <"$d/env"
  rc=0
  env -i PATH="$PATH" TRUN_SYSFS_ROOT="$d/sys" TRUN_DEV_ROOT="$d/dev" TRUN_DMI_ROOT="$d/dmi" \
    TRUN_NVML_LIBRARY="$lib" TRUN_FAKE_NVML_TOPO="$topo_json" TRUN_CUDART_LIBRARY="$rt" \
    TRUN_FAKE_CUDART_TOPO="$d/cudart.json" TRUN_SHM_PATH="$tmp/shm" AWS_EC2_METADATA_DISABLED=true "${vars[@]}" \
    unshare -m sh -c 'mount -t tmpfs -o "size=$0" trun69 "$1" && shift && exec "$@"' "$size" "$tmp/shm" \
    "$topo" health "$@" >"$tmp/o" 2>"$tmp/e" || rc=$?
}

# check_json FIXTURE EXPECTED: the JSON in $tmp/o lists every check in order with every field, and each
# status is EXPECTED's (a string of 12 letters P W F S in check order).
check_json() {
  python3 - "$tmp/o" "$1" "$2" <<'PY' || fail "$1: trun-topo health --json: $(cat "$tmp/o" "$tmp/e")"
import json, sys
d = json.load(open(sys.argv[1]))
name, want = sys.argv[2], sys.argv[3]
order = ["nvml", "gpu-count", "row-remap", "retired-pages", "ecc", "clocks", "pcie", "nvlink",
         "recovery-action", "efa-ports", "efa-count", "shm"]
assert [c["name"] for c in d["checks"]] == order, [c["name"] for c in d["checks"]]
letter = {"pass": "P", "warn": "W", "fail": "F", "skip": "S"}
got = "".join(letter[c["status"]] for c in d["checks"])
for c in d["checks"]:
    for k in ("value", "threshold", "reason", "source"):
        assert isinstance(c[k], str) and c[k], (name, c["name"], k, c)
    if c["status"] == "skip":
        assert c["reason"].startswith("cannot run: "), (name, c)
assert isinstance(d["elapsed_ms"], (int, float)) and d["elapsed_ms"] >= 0, d["elapsed_ms"]
worst = "fail" if "F" in got else "warn" if "W" in got else "pass"
assert d["status"] == worst, (d["status"], worst)
assert got == want, "%s: statuses %s, want %s: %s" % (name, got, want, [(c["name"], c["status"], c["reason"]) for c in d["checks"]])
print("ok %-14s %s  %.1f ms" % (name, got, d["elapsed_ms"]))
PY
}

echo "== 1. every fixture"
#            nvml count remap retired ecc clocks pcie nvlink recovery efa-ports efa-count shm
declare -A want=(
  [p4d.24xlarge]=PPPSPPPPPPPP
  [p4d-faulty]=PFFFFFWFFFFP
  [pod-p4d-4of8]=PPPSPPPPPPPP
  [p5.48xlarge]=PPPSPPPPPPPP
  [g5.48xlarge]=PPPSPPPSPPPP
  [g6e.12xlarge]=PPPSPPPSPPPP
  [h200x2]=PSPSPPPPPSSP
  [trn1.32xlarge]=SSSSSSSSSPSP
  [cpu-only]=SSSSSSSSSSSP
  [pcie-cudart]=SSSSSSSSSSSP
)
n=0
for d in "$fx"/*/; do
  name=$(basename "$d")
  [ -n "${want[$name]:-}" ] || fail "$name: a fixture this test has no expectation for (add it to 'want')"
  run 2g "$name" -- --json --no-imds
  expect=0
  case ${want[$name]} in *F*) expect=3 ;; esac
  [ $rc -eq $expect ] || fail "$name: exit $rc, want $expect: $(cat "$tmp/e")"
  check_json "$name" "${want[$name]}"
  n=$((n + 1))
done
[ $n -eq ${#want[@]} ] || fail "ran $n fixtures, expected ${#want[@]}"
# The faulty node's reasons name the GPU, the device and the fix.
run 2g p4d-faulty -- --json --no-imds
python3 - "$tmp/o" <<'PY' || fail "p4d-faulty: reasons: $(cat "$tmp/o")"
import json, sys
c = {x["name"]: x for x in json.load(open(sys.argv[1]))["checks"]}
assert c["gpu-count"]["value"] == "7" and "a GPU is missing" in c["gpu-count"]["reason"], c["gpu-count"]
assert "GPU 1 GPU-" in c["row-remap"]["value"] and "reset the GPU" in c["row-remap"]["reason"]
assert "2 uncorrectable ECC error(s)" in c["ecc"]["reason"]
assert "HW slowdown, HW power brake" in c["clocks"]["value"]
assert "Gen4 x8 of Gen4 x16" in c["pcie"]["value"]
assert "2 of 12 down (link 3,7)" in c["nvlink"]["value"]
assert "NODE_REBOOT" in c["recovery-action"]["reason"]
assert "rdmap32s27 port 1: 1: DOWN / 2: Polling" in c["efa-ports"]["value"]
assert "3 EFA device(s) of the 4 a p4d.24xlarge has" in c["efa-count"]["reason"]
PY
echo "ok faulty reasons"

echo "== 2. a 64 MiB /dev/shm; the table form"
run 64m p4d.24xlarge -- --json --no-imds
[ $rc -eq 0 ] || fail "shm 64m: exit $rc (a warning must not fail): $(cat "$tmp/e")"
check_json "p4d shm 64m" PPPSPPPPPPPW
grep -q -- "--shm-size=1g" "$tmp/o" && grep -q "medium: Memory" "$tmp/o" || fail "shm: no fix in $(cat "$tmp/o")"
run 64m p4d-faulty -- --no-imds
[ $rc -eq 3 ] || fail "table form, p4d-faulty: exit $rc, want 3"
grep -q "^FAIL  ecc " "$tmp/o" && grep -q "^WARN  shm  *64 MiB" "$tmp/o" || fail "table form: $(cat "$tmp/o")"
grep -Eq "^verdict: FAIL: 1 passed, 2 warned, 9 failed, 0 could not run; [0-9.]+ ms$" "$tmp/o" ||
  fail "table form: verdict line: $(tail -n 1 "$tmp/o")"
run 2g p4d.24xlarge -- --no-imds
[ $rc -eq 0 ] && grep -q "^verdict: PASS: 11 passed, 0 warned, 0 failed, 1 could not run" "$tmp/o" ||
  fail "table form, p4d: exit $rc: $(cat "$tmp/o")"
echo "ok shm and table"

echo "== 3. an older driver without the calls"
python3 - "$fx/p4d.24xlarge/nvml.json" "$tmp/old.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["missing"] = ["nvmlDeviceGetRemappedRows", "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetTotalEccErrors",
                "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
                "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetFieldValues"]
json.dump(d, open(sys.argv[2], "w"))
PY
run 2g p4d.24xlarge "$tmp/old.json" -- --json --no-imds
[ $rc -eq 0 ] || fail "old driver: exit $rc, want 0 (a check that cannot run is no failure)"
check_json "p4d old driver" PPSSSSSPSPPP
grep -q "the driver's NVML lacks nvmlDeviceGetRemappedRows" "$tmp/o" || fail "old driver: no cause: $(cat "$tmp/o")"

echo "== 4. --checks and bad input"
run 2g p4d-faulty -- --json --no-imds --checks ecc,nvlink
[ $rc -eq 3 ] || fail "--checks ecc,nvlink: exit $rc"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [c["name"] for c in d["checks"]] == ["ecc", "nvlink"], d' \
  "$tmp/o" || fail "--checks ecc,nvlink: $(cat "$tmp/o")"
run 2g p4d-faulty -- --json --no-imds --checks=-ecc,-nvlink,-gpu-count,-row-remap,-retired-pages,-clocks,-recovery-action,-efa-ports,-efa-count
[ $rc -eq 0 ] || fail "--checks leaving out every failing one: exit $rc: $(cat "$tmp/o")"
for bad in "--checks bogus" "--checks ," "--checks" "--bogus"; do
  # shellcheck disable=SC2086
  run 2g p4d.24xlarge -- $bad
  [ $rc -eq 2 ] || fail "'$bad': exit $rc, want 2"
  [ "$(wc -l <"$tmp/e")" -eq 1 ] || fail "'$bad': want one line on stderr: $(cat "$tmp/e")"
  cat "$tmp/e"
done
grep -q "'--bogus'" "$tmp/e" || fail "--bogus: stderr does not name it"
run 2g p4d.24xlarge -- --checks bogus
grep -q "'bogus' names no check (checks: nvml, gpu-count" "$tmp/e" || fail "--checks bogus: $(cat "$tmp/e")"
grep -q -- "--checks LIST" <<<"$("$topo" health --help)" || fail "health --help"
echo "PASS: $n fixtures, shm, table, old driver, --checks"
