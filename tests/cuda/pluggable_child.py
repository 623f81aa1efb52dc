"""pluggable_child.py: one PyTorch process on a GPU, with or without dtr's CUDA allocator.

Run by tests/cuda/test_pluggable_torch.py and bench/cuda_step_time.py, one process per
run, because PyTorch lets a program swap its CUDA allocator only before the first CUDA
allocation. Prints one JSON line on stdout.

    pluggable_child.py train  LIBRARY|- STEPS   # a small CNN with BatchNorm, SGD-momentum
    pluggable_child.py time   LIBRARY|- STEPS   # torchvision resnet18 steps, timed
    pluggable_child.py refuse LIBRARY BYTES     # one allocation over DTR_BUDGET
    pluggable_child.py stats  LIBRARY STEPS     # train, through dtr.cuda.use(), then its stats

LIBRARY is build/lib/libdtr_cuda.so, or '-' for PyTorch's own allocator. The time mode
also reports the peak allocated and reserved bytes, from torch.cuda for PyTorch's
allocator and from dtr.cuda.memory_stats() for the library (None for a library without
dtr's stats, such as bench/cuda_floor_allocator.cpp) and the number of allocations the
process made, warm-up steps included.
"""
import ctypes
import hashlib
import json
import os
import statistics
import struct
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import dtr.cuda  # noqa: E402


def use_library(library):
    if library == "-":
        return
    allocator = torch.cuda.memory.CUDAPluggableAllocator(library, "dtr_malloc", "dtr_free")
    torch.cuda.memory.change_current_allocator(allocator)


def peaks(library):
    if library == "-":
        return {"peak_allocated": torch.cuda.max_memory_allocated(),
                "peak_reserved": torch.cuda.max_memory_reserved(),
                "allocations": torch.cuda.memory_stats()["allocation.all.allocated"]}
    if not hasattr(ctypes.CDLL(library), "dtr_cuda_memory_stats_json"):
        return {"peak_allocated": None, "peak_reserved": None,  # bench's floor allocator
                "allocations": None}
    stats = dtr.cuda.memory_stats()
    return {"peak_allocated": stats["allocated_bytes.all.peak"],
            "peak_reserved": stats["reserved_bytes.all.peak"],
            "allocations": stats.get("allocation.all.allocated")}


def bits(value):
    return struct.unpack("<I", struct.pack("<f", value))[0]


def train(steps):
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(inplace=True),
        torch.nn.Conv2d(16, 32, 3, padding=1, stride=2), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 3, 32, 32, generator=generator).to(device)
        y = torch.randint(0, 10, (64,), generator=generator).to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(bits(loss.item()))
    digest = hashlib.sha256()
    for name, tensor in list(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return {"loss_bits": losses, "state_sha256": digest.hexdigest()}


def time_steps(steps):
    import torchvision
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = torchvision.models.resnet18(num_classes=100).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 128, 128, device=device)
    y = torch.randint(0, 100, (64,), device=device)
    times = []
    for step in range(steps + 3):  # 3 warm-up steps (cuDNN plans, the allocator's cache)
        torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        torch.cuda.synchronize()
        if step >= 3:
            times.append(time.perf_counter() - start)
    return {"median_step_s": statistics.median(times), "steps": steps}


def stats_after_training(library, steps):
    dtr.cuda.use(budget="8G", library=library)
    out = train(steps)
    stats = dtr.cuda.memory_stats()
    out["stats"] = stats
    out["released"] = dtr.cuda.empty_cache()
    out["after_empty"] = dtr.cuda.memory_stats()
    return out


def refuse(nbytes):
    # A small allocation first, so CUDA is initialised and the library has read DTR_BUDGET.
    small = torch.ones(16, device="cuda")
    result = {"small_ok": float(small.sum().item()) == 16.0}
    try:
        big = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        result["outcome"] = "tensor"
        result["data_ptr"] = big.data_ptr()
    except Exception as error:  # what PyTorch does with a nullptr from dtr_malloc
        result["outcome"] = "exception"
        result["type"] = type(error).__name__
        result["message"] = str(error)[:400]
    return result


if __name__ == "__main__":
    mode, library, arg = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "stats":
        out = stats_after_training(library, arg)
    else:
        use_library(library)
    if mode == "train":
        out = train(arg)
    elif mode == "time":
        out = time_steps(arg)
        out.update(peaks(library))
    elif mode == "refuse":
        out = refuse(arg)
    elif mode != "stats":
        sys.exit(f"pluggable_child.py: unknown mode {mode!r} (train, time, refuse or stats)")
    print(json.dumps(out), flush=True)
