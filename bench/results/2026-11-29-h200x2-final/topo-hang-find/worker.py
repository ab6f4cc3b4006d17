import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(1 << 20, device="cuda")
end = time.time() + 12
while time.time() < end:
    dist.all_reduce(x)
    torch.cuda.synchronize()
    time.sleep(0.05)
dist.destroy_process_group()
