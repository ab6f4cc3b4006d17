# A worker for tests/integration/42-agent-deaths.sh; the first argument says how local rank 0 dies:
#   oom    allocate torch tensors until the kernel's OOM killer ends it (run inside a memory cgroup)
#   kill   SIGKILL itself (not the OOM killer)
#   import fail at start-up with an import error
#   stuck  wait for <dir>/go (rank 1 writes its pid to <dir>/pid.1 and waits; the test freezes it), exit 1
#   say    copy the file <dir>/say.txt (a real error's text: tests/fixtures/causes) to stderr, exit 1
#   fakekmsg  write a forged kernel OOM record naming this process to /dev/kmsg (root), then SIGKILL itself
# The other local ranks wait (sleep) until the agent stops them; with TRUN_T42_RANK1=ignore_term they ignore
# SIGTERM (the agent's SIGKILL after --shutdown-timeout ends them), with =selfkill they SIGKILL themselves
# on SIGTERM.
import os, signal, sys, time

how, d = sys.argv[1], sys.argv[2]
lr = int(os.environ["LOCAL_RANK"])
if lr != 0:
    other = os.environ.get("TRUN_T42_RANK1", "")
    if other == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif other == "selfkill":
        signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGKILL))
    with open(os.path.join(d, "pid.%d" % lr), "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.5)
if how == "fakekmsg":
    with open("/dev/kmsg", "w") as k:
        k.write("<3>Memory cgroup out of memory: Killed process %d (python3) total-vm:1kB, anon-rss:1kB, "
                "file-rss:0kB (a forged record: trun test 42)\n" % os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)
if how == "import":
    import nonexistent_module_for_trun_test  # noqa: F401
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if how == "say":
    sys.stderr.write(open(os.path.join(d, "say.txt")).read())
    sys.exit(1)
if how == "stuck":
    while not os.path.exists(os.path.join(d, "go")):
        time.sleep(0.1)
    sys.exit(1)
import torch

print("rank 0: allocating until the OOM killer stops this process", flush=True)
hold = []
while True:
    hold.append(torch.ones(32 * 1024 * 1024, dtype=torch.uint8))
