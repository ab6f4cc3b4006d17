#!/usr/bin/env python3
"""TCPStore differential and behaviour checks with torch's own Python client (torch 1.13 or 2.x).

Usage (run by tests/integration/10-store-torch-ops.sh, with a python that has torch):
  ops.py serve                    start torch's own TCPStore server on 127.0.0.1, port 0 (classic server,
                                  use_libuv=False on 2.x); prints "PORT <n>" and then sleeps until killed
  ops.py ops HOST PORT            every operation this torch version's Python API has, one normalised
                                  result per op ("OP name" then "=> result" or "ERR name ExceptionType");
                                  the output is diffed between torch's server and trun-store
  ops.py wake HOST PORT           waiters blocked in one client are woken by another client's SET/ADD
                                  (and, for 2.x, APPEND/MULTI_SET); multi-key waits need every key
  ops.py adds HOST PORT N M       N clients (threads, each with its own TCPStore = own connection) each do M
                                  add(ctr, 1) at the same time; checks ctr == N*M and that the N*M replies
                                  are exactly 1..N*M (every ADD atomic)
  ops.py caswake HOST PORT wake|nowake
                                  a waiter on a missing key, another client creates it with compare_set:
                                  'wake' = the waiter returns (trun-store, like torch's libuv server);
                                  'nowake' = it times out (torch's classic server never wakes on COMPARE_SET)
  ops.py steps 'CMD ARGS' ...    several of wake/adds/caswake in this one process (one torch import), in order:
                                  each between "STEP <i> <its command line>" and "STEP <i> rc <exit status>"
                                  on stdout ("STEP <i> ..." also on stderr before its messages); exit 1 if any
                                  failed
  ops.py xver HOST PORT ME PEER   cross-version exchange: set xv/<ME>, get xv/<PEER> (blocks until the other
                                  process set it), shared counter and compare_set; run by two torch versions
                                  against the same server at the same time
Exit status: 0 ok, 1 a check failed. Only the generous time-outs below bound the run; nothing is timed.
"""
import datetime
import hashlib
import os
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist

TD = datetime.timedelta
# torch >= 2.1 Python TCPStore has check/append/multi_get/multi_set (1.13 has none of them).
V2 = hasattr(dist.TCPStore, "check")
VERSION = torch.__version__
NS = ""  # key prefix of wake/adds/caswake: a fresh name space per run
SAFETY = 60  # seconds: upper bound for anything that is expected to succeed


# TRUN_OPS_USE_LIBUV=1 (torch >= 2.4 built with libuv, e.g. 2.11 on the GPU box): torch's libuv server.
LIBUV = os.environ.get("TRUN_OPS_USE_LIBUV") == "1"


def client(host, port, timeout=SAFETY):
    kw = {"use_libuv": LIBUV} if V2 else {}
    return dist.TCPStore(host, int(port), None, False, timeout=TD(seconds=timeout),
                         wait_for_workers=False, **kw)


def norm(v):
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v)
        if len(v) > 64:
            return "bytes(len=%d sha256=%s)" % (len(v), hashlib.sha256(v).hexdigest()[:16])
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(norm(x) for x in v) + "]"
    return repr(v)


def run_op(name, fn):
    print("OP", name, flush=True)
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - the exception type is the result
        print("ERR", name, type(e).__name__, flush=True)
        print("   (%s: %s)" % (name, str(e).splitlines()[0] if str(e) else ""), file=sys.stderr, flush=True)
        return None
    print("=>", norm(r), flush=True)
    return r


# ---------------------------------------------------------------------------------------------------------
def cmd_serve():
    kw = {"use_libuv": LIBUV} if V2 else {}
    # world_size=1 and wait_for_workers=False: the server's own client adds no init/ key.
    srv = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=TD(seconds=SAFETY), wait_for_workers=False, **kw)
    print("PORT %d" % srv.port, flush=True)
    while True:
        time.sleep(3600)


OPS_TIMEOUT = 20  # store timeout of the differential run: bounds a get() of a key a faulty server lost


def cmd_ops(host, port):
    s = client(host, port, OPS_TIMEOUT)
    other = client(host, port, OPS_TIMEOUT)
    big4 = bytes((i * 7 + (i >> 12)) & 0xFF for i in range(4 << 20))
    big9 = big4 + big4 + big4[: 1 << 20]  # 9 MiB: above torch's libuv limit (8 MiB), fine for classic
    binv = bytes(range(256)) * 3

    run_op("num_keys_fresh", lambda: s.num_keys())
    run_op("set", lambda: s.set("k", "bar"))
    run_op("get", lambda: s.get("k"))
    run_op("set_overwrite", lambda: s.set("k", b"baz"))
    run_op("get_overwritten", lambda: s.get("k"))
    run_op("get_from_other_conn", lambda: other.get("k"))
    run_op("add_new", lambda: s.add("cnt", 5))
    run_op("add_neg", lambda: s.add("cnt", -2))
    run_op("add_zero", lambda: s.add("cnt", 0))
    run_op("get_cnt", lambda: s.get("cnt"))
    run_op("add_neg_new", lambda: s.add("neg", -7))
    run_op("get_neg", lambda: s.get("neg"))
    run_op("add_large", lambda: s.add("big", 1 << 62))
    run_op("add_large2", lambda: s.add("big", (1 << 62) - 1))  # INT64_MAX exactly
    run_op("get_big", lambda: s.get("big"))
    run_op("set_numeric_junk", lambda: s.set("junk", "12abc"))
    run_op("add_numeric_junk", lambda: s.add("junk", 1))  # stoll ignores trailing junk: 13
    run_op("set_spaces", lambda: s.set("sp", "  -4"))
    run_op("add_spaces", lambda: s.add("sp", 10))
    run_op("num_keys_before_cas", lambda: s.num_keys())
    run_op("cas_missing_nonempty_expected", lambda: s.compare_set("cm", "x", "y"))  # replies expected
    run_op("num_keys_after_cas_missing", lambda: s.num_keys())  # nothing stored
    run_op("cas_missing_empty_expected", lambda: s.compare_set("cm", "", "y"))  # creates
    run_op("cas_match", lambda: s.compare_set("cm", "y", "z"))
    run_op("cas_mismatch", lambda: s.compare_set("cm", "nope", "w"))
    run_op("get_cm", lambda: s.get("cm"))
    run_op("cas_present_empty_expected", lambda: s.compare_set("cm", "", "q"))  # mismatch: value 'z'
    run_op("cas_to_empty", lambda: s.compare_set("cm", "z", ""))
    run_op("get_cm_empty", lambda: s.get("cm"))
    run_op("cas_empty_match", lambda: s.compare_set("cm", "", "r"))  # present and equal to ''
    run_op("wait_present", lambda: s.wait(["k"]))
    run_op("wait_present_multi", lambda: s.wait(["k", "cnt", "cm"]))
    run_op("wait_present_timeout", lambda: s.wait(["k", "cnt"], TD(seconds=SAFETY)))
    run_op("wait_none", lambda: s.wait([]))
    run_op("num_keys", lambda: s.num_keys())
    run_op("delete", lambda: s.delete_key("k"))
    run_op("delete_again", lambda: s.delete_key("k"))
    run_op("delete_missing", lambda: s.delete_key("never"))
    run_op("num_keys_after_delete", lambda: s.num_keys())
    run_op("set_after_delete", lambda: s.set("k", "again"))
    run_op("get_after_delete", lambda: s.get("k"))
    run_op("set_timeout", lambda: s.set_timeout(TD(seconds=OPS_TIMEOUT)))
    run_op("set_empty_value", lambda: s.set("e", b""))
    run_op("get_empty_value", lambda: s.get("e"))
    run_op("set_empty_key", lambda: s.set("", "ev"))
    run_op("get_empty_key", lambda: s.get(""))
    run_op("set_utf8", lambda: s.set("ключ/ü", "wert/ü"))
    run_op("get_utf8", lambda: s.get("ключ/ü"))
    run_op("set_binary", lambda: s.set("bin", binv))
    run_op("get_binary", lambda: s.get("bin"))
    run_op("get_binary_equal", lambda: s.get("bin") == binv)
    run_op("set_4mib", lambda: s.set("large", big4))
    run_op("get_4mib", lambda: s.get("large"))
    run_op("get_4mib_other_conn_equal", lambda: other.get("large") == big4)
    if not LIBUV:
        # torch's libuv server closes on values over 8 MiB (trun-store and the classic server take them).
        run_op("set_9mib", lambda: s.set("large9", big9))
        run_op("get_9mib_equal", lambda: s.get("large9") == big9)
    run_op("add_on_other_conn", lambda: other.add("cnt", 100))
    run_op("get_cnt_after_other", lambda: s.get("cnt"))
    if V2:
        run_op("check_missing", lambda: s.check(["nokey"]))
        run_op("check_present", lambda: s.check(["cnt"]))
        run_op("check_partial", lambda: s.check(["cnt", "nokey"]))
        run_op("check_empty_list", lambda: s.check([]))
        run_op("check_empty_value_key", lambda: s.check(["e"]))
        run_op("append_create", lambda: s.append("ap", "12"))
        run_op("append_more", lambda: s.append("ap", b"34"))
        run_op("append_empty", lambda: s.append("ap", b""))
        run_op("get_append", lambda: s.get("ap"))
        run_op("append_binary", lambda: s.append("ap", binv))
        run_op("get_append_binary", lambda: s.get("ap") == b"1234" + binv)
        run_op("multi_set", lambda: s.multi_set(["m1", "m2", "m3"], ["1", b"", b"\x00\xff"]))
        run_op("multi_get", lambda: s.multi_get(["m1", "m2", "m3"]))
        run_op("multi_get_one", lambda: s.multi_get(["cnt"]))
        run_op("multi_get_large", lambda: s.multi_get(["large", "m1"]))
        run_op("multi_set_overwrite", lambda: s.multi_set(["m1", "m1"], ["a", "b"]))
        run_op("get_m1", lambda: s.get("m1"))
        run_op("num_keys_v2", lambda: s.num_keys())
        # Time-outs: 2.x cancels the wait (CANCEL_WAIT) and the connection stays usable.
        run_op("wait_timeout", lambda: s.wait(["late"], TD(seconds=1)))
        run_op("usable_after_wait_timeout", lambda: (s.set("u1", "ok1"), s.get("u1"))[1])
        run_op("other_sets_late", lambda: other.set("late", "v"))
        run_op("get_late", lambda: s.get("late"))  # no stale STOP_WAITING byte on the connection
        run_op("wait_timeout_multi", lambda: s.wait(["late", "late2"], TD(seconds=1)))
        run_op("usable_after_multi_timeout", lambda: s.add("cnt", 1))
        run_op("set_timeout_short", lambda: s.set_timeout(TD(seconds=1)))
        run_op("get_timeout", lambda: s.get("missing2"))
        run_op("multi_get_timeout", lambda: s.multi_get(["cnt", "missing3"]))
        run_op("set_timeout_back", lambda: s.set_timeout(TD(seconds=OPS_TIMEOUT)))
        run_op("usable_after_get_timeout", lambda: s.get("u1"))
        run_op("other_sets_missing2", lambda: other.set("missing2", "m2v"))
        run_op("get_missing2", lambda: s.get("missing2"))
        run_op("wait_timeout_then_key_on_same_conn", lambda: s.wait(["late3"], TD(seconds=1)))
        run_op("set_late3_same_conn", lambda: s.set("late3", "x"))
        run_op("wait_late3", lambda: s.wait(["late3"]))
        run_op("add_after_all", lambda: s.add("cnt", 1))
    else:
        # 1.13: no CANCEL_WAIT. A wait time-out leaves the server's registration in place; the server's later
        # STOP_WAITING byte is read as the reply of a later request (spec §4, capture B). Use a third connection.
        t = client(host, port, OPS_TIMEOUT)
        run_op("wait_timeout", lambda: t.wait(["late"], TD(seconds=1)))
        run_op("other_sets_late", lambda: (other.set("late", "v"), other.get("late"))[1])
        run_op("set_timeout_short", lambda: t.set_timeout(TD(seconds=2)))
        run_op("desync_get_after_timeout", lambda: t.get("cnt"))  # spec: reads garbage length, times out
        t2 = client(host, port, timeout=1)
        run_op("get_timeout", lambda: t2.get("missing2"))
    run_op("num_keys_end", lambda: s.num_keys())
    # ADD on a non-integer value: torch's servers close the connection (no error reply exists). Last op on s.
    run_op("set_text", lambda: s.set("txt", "abc"))
    run_op("add_non_integer", lambda: s.add("txt", 1))
    run_op("closed_conn_after_add_non_integer", lambda: s.num_keys())
    fresh = client(host, port, OPS_TIMEOUT)
    run_op("server_alive_after_close", lambda: fresh.get("txt"))
    run_op("num_keys_final", lambda: fresh.num_keys())
    print("OP end", flush=True)
    return 0


# ---------------------------------------------------------------------------------------------------------
def waiter_thread(store, keys, out, idx, timeout=SAFETY):
    try:
        store.wait(keys, TD(seconds=timeout))
        out[idx] = "woken"
    except Exception as e:  # noqa: BLE001
        out[idx] = "ERR " + type(e).__name__


def start_waiters(host, port, keys, n, timeout=SAFETY, settle=0.5):
    out = [None] * n
    stores = [client(host, port) for _ in range(n)]
    ths = [threading.Thread(target=waiter_thread, args=(stores[i], keys, out, i, timeout), daemon=True)
           for i in range(n)]
    for t in ths:
        t.start()
    # Not an assertion: only gives the WAITs time to reach the server, so that the writes below exercise the
    # server-side wake-up path instead of finding the keys already present.
    time.sleep(settle)
    return stores, ths, out


def join_all(ths, timeout=SAFETY):
    deadline = time.time() + timeout
    for t in ths:
        t.join(max(0.0, deadline - time.time()))


def expect(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    return 0 if cond else 1


def cmd_wake(host, port):
    fails = 0
    b = client(host, port)
    writers = [("set", lambda k: b.set(k, "v")), ("add", lambda k: b.add(k, 3))]
    if V2:
        writers += [("append", lambda k: b.append(k, "v")), ("multi_set", lambda k: b.multi_set([k], ["v"]))]
    for name, w in writers:
        key = NS + "wake/" + name
        stores, ths, out = start_waiters(host, port, [key], 4)
        w(key)
        join_all(ths)
        fails += expect(out == ["woken"] * 4, "4 waiters on %s woken by another client's %s: %s" % (key, name, out))
        for st in stores:  # the woken connections still work
            st.add(NS + "wake/alive", 1)
    fails += expect(b.get(NS + "wake/alive") == str(4 * len(writers)).encode(), "woken connections still usable")
    # Multi-key wait: one of two keys written -> still blocked; both -> woken. A disconnected waiter is dropped.
    stores, ths, out = start_waiters(host, port, [NS + "mk/1", NS + "mk/2"], 4)
    b.set(NS + "mk/1", "1")
    time.sleep(0.5)  # a correct server keeps them blocked however long we look; only a negative check
    fails += expect(all(o is None for o in out), "multi-key waiters still blocked after 1 of 2 keys: %s" % out)
    b.set(NS + "mk/2", "2")
    join_all(ths)
    fails += expect(out == ["woken"] * 4, "multi-key waiters woken after both keys: %s" % out)
    # A deleted key can be waited on again and is woken by the next SET (DELETE_KEY itself wakes nobody).
    b.set(NS + "del/k", "1")
    b.delete_key(NS + "del/k")
    stores, ths, out = start_waiters(host, port, [NS + "del/k"], 2)
    fails += expect(all(o is None for o in out), "waiters on a deleted key block: %s" % out)
    b.set(NS + "del/k", "2")
    join_all(ths)
    fails += expect(out == ["woken"] * 2, "waiters on a deleted key woken by SET: %s" % out)
    # get() (WAIT then GET) blocked in one client, value set by another.
    got = [None]
    g = client(host, port)

    def getter():
        try:
            got[0] = g.get(NS + "late/get")
        except Exception as e:  # noqa: BLE001
            got[0] = "ERR " + type(e).__name__
    th = threading.Thread(target=getter, daemon=True)
    th.start()
    time.sleep(0.5)
    b.set(NS + "late/get", b"\x01value")
    th.join(SAFETY)
    fails += expect(got[0] == b"\x01value", "blocked get() returns the value set later by another client: %r" % got[0])
    # Wait time-out: exception type, then (2.x) the same connection keeps working.
    w = client(host, port)
    try:
        w.wait([NS + "never/set"], TD(seconds=1))
        fails += expect(False, "wait on a missing key must time out")
    except Exception as e:  # noqa: BLE001
        want = "DistStoreError" if V2 else "RuntimeError"
        fails += expect(type(e).__name__ == want, "wait time-out raises %s (got %s: %s)" % (want, type(e).__name__, e))
    if V2:
        w.set(NS + "after/timeout", "fine")
        fails += expect(w.get(NS + "after/timeout") == b"fine", "2.x connection usable after a wait time-out")
        b.set(NS + "never/set", "now")  # server must not send a stale STOP_WAITING on w (wait was cancelled)
        fails += expect(w.add(NS + "after/cnt", 1) == 1, "no stale byte after the cancelled wait's key is set")
        fails += expect(w.get(NS + "never/set") == b"now", "get on the same connection after that")
    return 1 if fails else 0


def cmd_adds(host, port, n, m):
    n, m = int(n), int(m)
    stores = [client(host, port) for _ in range(n)]
    go = threading.Barrier(n)
    results = [None] * n

    def worker(i):
        try:
            go.wait(SAFETY)
            results[i] = [stores[i].add(NS + "ctr", 1) for _ in range(m)]
        except Exception as e:  # noqa: BLE001
            results[i] = "ERR %s: %s" % (type(e).__name__, e)
    ths = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in ths:
        t.start()
    join_all(ths)
    fails = 0
    errs = [r for r in results if not isinstance(r, list)]
    fails += expect(not errs, "all %d clients finished their adds: %s" % (n, errs[:3]))
    if not errs:
        allv = sorted(v for r in results for v in r)
        fails += expect(allv == list(range(1, n * m + 1)), "the %d ADD replies are exactly 1..%d" % (n * m, n * m))
        fails += expect(all(r == sorted(r) for r in results), "each client's replies increase")
    final = client(host, port).get(NS + "ctr")
    fails += expect(final == str(n * m).encode(), "final counter %r == %d" % (final, n * m))
    return 1 if fails else 0


def cmd_caswake(host, port, mode):
    fails = 0
    b = client(host, port)
    timeout = SAFETY if mode == "wake" else 4
    # nowake: a WAIT reaching the server after the COMPARE_SET would return at once and read as a wake-up,
    # so give the waiters more time to get there (a correct classic server keeps them blocked regardless).
    stores, ths, out = start_waiters(host, port, [NS + "cas/w"], 2, timeout=timeout,
                                     settle=0.5 if mode == "wake" else 2.0)
    r = b.compare_set(NS + "cas/w", "", "created")
    fails += expect(r == b"created", "compare_set creates the key: %r" % r)
    join_all(ths)
    if mode == "wake":
        fails += expect(out == ["woken"] * 2, "COMPARE_SET that creates the key wakes its waiters: %s" % out)
    else:
        want = "ERR DistStoreError" if V2 else "ERR RuntimeError"
        fails += expect(out == [want] * 2, "classic server: COMPARE_SET wakes nobody, waits time out: %s" % out)
    # A COMPARE_SET that changes the value of an existing key (waiters only ever wait on missing keys, so
    # this only checks the reply) and a COMPARE_SET on a missing key with a non-empty expected value, which
    # stores nothing. torch's libuv server wakes waiters even then (spec §3); trun-store wakes only when it
    # stores: the waiter is then woken by the following SET.
    r = b.compare_set(NS + "cas/w", "created", "changed")
    fails += expect(r == b"changed", "compare_set replaces a matching value: %r" % r)
    if mode == "wake":
        stores, ths, out = start_waiters(host, port, [NS + "cas/none"], 1)
        r = b.compare_set(NS + "cas/none", "expected", "desired")
        fails += expect(r == b"expected", "compare_set on a missing key with expected != '' replies expected: %r" % r)
        time.sleep(0.5)  # negative check only
        fails += expect(out == [None], "trun-store: nothing stored, the waiter stays blocked: %s" % out)
        b.set(NS + "cas/none", "now")
        join_all(ths)
        fails += expect(out == ["woken"], "then woken by a SET: %s" % out)
    return 1 if fails else 0


def cmd_xver(host, port, me, peer):
    fails = 0
    s = client(host, port)
    s.set("xv/" + me, "from-" + me)
    got = s.get("xv/" + peer)  # WAIT + GET: may block until the peer sets it (cross-version wake-up)
    fails += expect(got == ("from-" + peer).encode(), "%s reads the key %s set: %r" % (me, peer, got))
    for _ in range(100):
        s.add("xv/ctr", 1)
    # compare_set race: exactly one of the two creates the key.
    r = s.compare_set("xv/owner", "", me)
    print("compare_set owner reply %r" % r, flush=True)
    s.set("xv/done/" + me, "1")
    s.wait(["xv/done/" + peer])
    fails += expect(s.get("xv/ctr") == b"200", "shared counter after both: %r" % s.get("xv/ctr"))
    owner = s.get("xv/owner")
    fails += expect(owner in (me.encode(), peer.encode()), "one owner: %r" % owner)
    fails += expect(r == owner, "my compare_set reply equals the final owner %r" % owner)
    # The peer's binary value round-trips through the other generation.
    s.set("xv/bin/" + me, bytes(range(256)))
    fails += expect(s.get("xv/bin/" + peer) == bytes(range(256)), "binary value from the peer")
    s.set("xv/fin/" + me, "1")
    s.wait(["xv/fin/" + peer])
    return 1 if fails else 0


def cmd_steps(*steps):
    worst = 0
    for i, step in enumerate(steps):
        words = step.split()
        if not words or words[0] not in ("wake", "adds", "caswake"):
            print("steps: step %d %r is not a wake, adds or caswake command" % (i, step), file=sys.stderr)
            return 2
        print("STEP %d %s" % (i, step), flush=True)
        print("STEP %d %s" % (i, step), file=sys.stderr, flush=True)
        rc = run(words[0], words[1:], "%s.%d.%d/" % (words[0], os.getpid(), i))
        sys.stderr.flush()
        print("STEP %d rc %d" % (i, rc), flush=True)
        worst = max(worst, 1 if rc else 0)
    return worst


def main(argv):
    print("# torch %s (%s API), python %s" % (VERSION, "2.x" if V2 else "1.13", sys.version.split()[0]),
          file=sys.stderr, flush=True)
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "steps":
        return cmd_steps(*args)
    return run(cmd, args, "%s.%d/" % (cmd, os.getpid()))


def run(cmd, args, ns):
    global NS
    if cmd in ("wake", "adds", "caswake"):
        NS = ns
    try:
        if cmd == "serve":
            return cmd_serve()
        if cmd == "ops":
            return cmd_ops(*args)
        if cmd == "wake":
            return cmd_wake(*args)
        if cmd == "adds":
            return cmd_adds(*args)
        if cmd == "caswake":
            return cmd_caswake(*args)
        if cmd == "xver":
            return cmd_xver(*args)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    print("unknown command %r" % cmd, file=sys.stderr)
    return 2


if __name__ == "__main__":
    rc = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # do not wait for daemon threads still blocked in a store call
