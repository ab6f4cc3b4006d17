#!/usr/bin/env python3
"""Real torch c10d rendezvous state pickles for trun's C pickle reader/writer (agent/rdzv/c10d_state.c).

  rdzv_pickle.py gen OUTDIR     writes OUTDIR/<torch>-<shape>.b64 (base64 of pickle.dumps(_RendezvousState), as
                                torch stores it) and OUTDIR/<torch>-<shape>.expect (the canonical text below)
  rdzv_pickle.py check DIR      for every DIR/*.b64 (written by C): unpickles it into the real torch classes,
                                checks the types and that the canonical text equals DIR/<name>.expect; for names
                                listed in DIR/identical.txt also that pickle.dumps(obj, 4) gives the same bytes
  rdzv_pickle.py dump FILE.b64  prints the canonical text

Objects are built the way a torch agent holds them after reading the state from the store: one _NodeDesc object
per node (shared by participants / wait_list / redundancy_list / last_heartbeats), a fresh str per addr, a fresh
datetime per heartbeat, timezone.utc shared. Canonical text (also produced by the C unit test):
  layout key=<addr|fqdn> redundancy=<0|1> tz=<naive|aware>
  round N / complete 0|1 / deadline none|YYYY-MM-DDTHH:MM:SS.ffffff / closed 0|1
  participant ADDR PID LOCAL_ID RANK ... / wait ... / redundant ... (sorted) / heartbeat ADDR PID LOCAL_ID TIME
Exit: 0 ok, 1 mismatch, 77 no torch."""
import base64
import datetime as dt
import os
import pickle
import sys

try:
    import torch
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
except ImportError:
    sys.stderr.write("no torch\n")
    sys.exit(77)

NODE_KEY = "fqdn" if "fqdn" in dr._NodeDesc.__dataclass_fields__ else "addr"
TAG = "t" + ".".join(torch.__version__.split(".")[:2]).split("a")[0].split("+")[0]


def fresh(s):
    return "".join(list(s))  # a new str object, as the unpickler gives each node


def node(addr, pid, local_id=0):
    return dr._NodeDesc(**{NODE_KEY: fresh(addr), "pid": pid, "local_id": local_id})


def ts(base, i, aware):
    t = base + dt.timedelta(seconds=i // 7, microseconds=(i * 7919) % 1000000)
    return t.replace(tzinfo=dt.timezone.utc) if aware else t


def state(round_=0, complete=False, deadline=None, closed=False, parts=(), wait=(), red=None, aware=False, hb=()):
    s = dr._RendezvousState()
    s.round, s.complete, s.deadline, s.closed = round_, complete, deadline, closed
    s.participants = {n: r for n, r in parts}
    s.wait_list = set(wait)
    if red is None:
        if hasattr(s, "redundancy_list"):
            del s.redundancy_list
    else:
        s.redundancy_list = set(red)
    s.last_heartbeats = {n: t for n, t in hb}
    return s


def shapes():
    base = dt.datetime(2025, 1, 2, 3, 4, 5, 678901)
    red_ok = hasattr(dr._RendezvousState(), "redundancy_list")
    out = {}
    for aware in ([False, True] if red_ok else [False]):
        tz = "aware" if aware else "naive"
        red = [] if red_ok else None
        out[f"empty-{tz}"] = state(red=red, aware=aware)
        a, b = node("localhost", 9619), node("localhost", 9623)
        out[f"two-{tz}"] = state(0, True, None, False, [(a, 0), (b, 1)], red=red,
                                 hb=[(a, ts(base, 1, aware)), (b, ts(base, 2, aware))])
        ns = [node(f"node{i:03d}.cluster.example", 1000 + 37 * i, i % 3) for i in range(100)]
        out[f"hundred-{tz}"] = state(3, False, ts(base, 999, aware), False, [(n, 0) for n in ns], red=red,
                                     hb=[(n, ts(base, i, aware)) for i, n in enumerate(ns)])
        w = [node("late0", 7), node("late1", 8)]
        out[f"wait-{tz}"] = state(2**31 + 5, True, None, False, [(ns[1], 1), (ns[0], 0)], wait=w, red=red,
                                  hb=[(n, ts(base, i, aware)) for i, n in enumerate([ns[1], ns[0]] + w)])
        out[f"closed-{tz}"] = state(7, True, None, True, [(a, 0)], red=red, hb=[(a, ts(base, 3, aware))])
        out[f"deadline-{tz}"] = state(1, False, ts(base, 30, aware), False, [(a, 0), (b, 0)], red=red,
                                      hb=[(b, ts(base, 4, aware)), (a, ts(base, 5, aware))])
        if red_ok:
            r = [node("spare0", 70000, 1), node("spare1", 70001, 2)]
            out[f"redundancy-{tz}"] = state(4, True, None, False, [(a, 0), (b, 1)], red=r,
                                            hb=[(n, ts(base, i, aware)) for i, n in enumerate([a, b] + r)])
        big = [node(f"host-{i:05d}.rack{i % 40}.dc.example.com", 100000 + i, 0) for i in range(1200)]
        out[f"big1200-{tz}"] = state(9, False, ts(base, 5, aware), False, [(n, 0) for n in big],
                                     wait=big[:1000], red=red,
                                     hb=[(n, ts(base, i, aware)) for i, n in enumerate(big)])
    if red_ok:  # the 2.0-2.2 layout: addr keys, no redundancy_list, naive
        a = node("localhost", 1234)
        out["noredundancy-naive"] = state(1, True, None, False, [(a, 0)], red=None, hb=[(a, ts(base, 0, False))])
    return out


def fmt_time(t):
    if t is None:
        return "none"
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06d" % (t.year, t.month, t.day, t.hour, t.minute, t.second,
                                                   t.microsecond)


def canon(s):
    d = s.__dict__
    nd = lambda n: "%s %d %d" % (getattr(n, NODE_KEY), n.pid, n.local_id)
    times = [t for t in list(s.last_heartbeats.values()) + [s.deadline] if t is not None]
    tz = "aware" if any(t.tzinfo is not None for t in times) else "naive"
    lines = ["layout key=%s redundancy=%d tz=%s" % (NODE_KEY, "redundancy_list" in d, tz),
             "round %d" % s.round, "complete %d" % s.complete, "deadline " + fmt_time(s.deadline),
             "closed %d" % s.closed]
    lines += ["participant %s %d" % (nd(n), r) for n, r in s.participants.items()]
    lines += sorted("wait " + nd(n) for n in s.wait_list)  # sets: their order is the hash's
    lines += sorted("redundant " + nd(n) for n in d.get("redundancy_list", ()))
    lines += ["heartbeat %s %s" % (nd(n), fmt_time(t)) for n, t in s.last_heartbeats.items()]
    return "\n".join(lines) + "\n"


def check_types(s):
    assert type(s) is dr._RendezvousState, type(s)
    nodes = list(s.participants) + list(s.wait_list) + list(s.last_heartbeats)
    nodes += list(s.__dict__.get("redundancy_list", ()))
    assert all(type(n) is dr._NodeDesc for n in nodes)
    assert all(type(r) is int for r in s.participants.values())
    assert type(s.wait_list) is set and type(s.last_heartbeats) is dict
    for t in list(s.last_heartbeats.values()) + [s.deadline]:
        assert t is None or type(t) is dt.datetime
        assert t is None or t.tzinfo in (None, dt.timezone.utc)
    assert type(s.round) is int and type(s.complete) is bool and type(s.closed) is bool


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    if cmd == "gen":
        os.makedirs(path, exist_ok=True)
        for name, s in shapes().items():
            raw = pickle.dumps(s)  # the interpreter's default protocol, as torch does
            with open(os.path.join(path, f"{TAG}-{name}.b64"), "wb") as f:
                f.write(base64.b64encode(raw))
            with open(os.path.join(path, f"{TAG}-{name}.expect"), "w") as f:
                f.write(canon(s))
            if name == "two-naive" or name == "two-aware":  # other protocols, for the reader only
                for proto in (2, 3, 5):
                    if proto <= pickle.HIGHEST_PROTOCOL:
                        with open(os.path.join(path, f"{TAG}-{name}-p{proto}.b64"), "wb") as f:
                            f.write(base64.b64encode(pickle.dumps(s, protocol=proto)))
                        with open(os.path.join(path, f"{TAG}-{name}-p{proto}.expect"), "w") as f:
                            f.write(canon(s))
        print(f"{TAG}: wrote {len(shapes())} shapes to {path} (node key {NODE_KEY})")
        return 0
    if cmd == "dump":
        sys.stdout.write(canon(pickle.loads(base64.b64decode(open(path, "rb").read()))))
        return 0
    bad = n = 0
    ident = set()
    if os.path.exists(os.path.join(path, "identical.txt")):
        ident = set(open(os.path.join(path, "identical.txt")).read().split())
    for fn in sorted(os.listdir(path)):
        if not fn.endswith(".b64"):
            continue
        name = fn[:-4]
        if ("fqdn" in name) != (NODE_KEY == "fqdn"):
            continue  # the layout of the other torch generation
        n += 1
        raw = base64.b64decode(open(os.path.join(path, fn), "rb").read(), validate=True)
        try:
            s = pickle.loads(raw)
            check_types(s)
            got = canon(s)
        except Exception as e:  # noqa: BLE001
            print(f"{TAG} {name}: cannot load: {e!r}")
            bad += 1
            continue
        want = open(os.path.join(path, name + ".expect")).read()
        if got != want:
            print(f"{TAG} {name}: fields differ\n--- C\n{want}--- python\n{got}")
            bad += 1
        elif name in ident and pickle.dumps(s, protocol=4) != raw:
            print(f"{TAG} {name}: python re-pickles to different bytes")
            bad += 1
        else:
            print(f"{TAG} {name}: ok" + (" (byte-identical)" if name in ident else ""))
    print(f"{TAG}: {n} checked, {bad} bad")
    return 1 if bad or n == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
