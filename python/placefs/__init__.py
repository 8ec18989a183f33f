# SPDX-License-Identifier: MIT
"""Load the tensors of a placefs mount, staging the GPU-placed ones.

A placefs mount shows one read-only file per selected tensor, annotated with
its placement: "gpu" tensors (payload <= the staging limit) travel through the
daemon's staging ring with the ioctls of include/placefs/ioctl.h, "cpu" tensors
are mapped from their source shards (private, populated mappings of the files
the daemon validated) or read by the daemon's reader threads straight into
this process's memory (STAGE_READ; a file system without it is read like any
file). This package speaks that protocol
from Python with the standard library alone; torch is used when it can be
imported (and numpy for PlacedTensor.numpy()).

Modules, from the bottom (everything public is re-exported here):

* placefs._ioctl: the protocol of include/placefs/ioctl.h. ring_info(fd),
  stage(fd, ...), release(fd, lease): one ioctl each, on a descriptor of a
  tensor file; the structs are packed with `struct` exactly as the C header
  lays them out.
* placefs.plan: .placefs/plan.json, one TensorInfo per tensor, with the file
  name the daemon gives it.
* placefs.mount: Mount(mountpoint): the plan, file paths, the ring, and
  Mount.borrow(name): a leased view of one staged tensor.
* placefs.loader: load_state_dict(mountpoint, device, mode, cpu): every tensor, in
  checkpoint order, as torch tensors (or PlacedTensor objects without torch);
  load() also returns a LoadReport. cpu-placed tensors, beside the gpu part, are
  mapped from their source shards (cpu="auto", the default, where nobody else may
  shorten the shard; "map") or come by STAGE_READ ("read"): the daemon's reader
  threads fill a shm object of this process.
* placefs._mapsrc: the mapping of cpu-placed tensors: a shard checked against
  .placefs/shards.json, mapped privately and populated on several threads.
* placefs.stream: iter_weights(mountpoint, device, mode): (name, tensor) one by
  one in checkpoint order as they land, with bounded memory in flight (copy:
  owned tensors; borrow: a ring view valid until the next item).
* placefs._torch: the one module that touches torch internals or the CUDA
  runtime (IPC handles of torch allocations, ctypes libcudart), with the torch
  versions it was checked on.
* placefs.cli: the command line, installed as placefs-load and run by
  python3 -m placefs: placefs-load MOUNTPOINT [--device D] [--mode copy|borrow]
  [--workers N] [--cpu auto|map|read] [--verify].

See doc/PYTHON.md for the details and the rules each error names.
"""

# The public names, plus the few internals tests/py/loader_test.py checks against the
# C header (the struct formats, _iowr) and the device parser it probes.
from ._ioctl import (
    BACKEND_CUDA, BACKEND_HOST, BACKEND_NONE, CUDA_IPC_HANDLE_BYTES, HANDLE_CUDA_IPC,
    HANDLE_HOST_SHM, HANDLE_MAX, HANDLE_NONE, IOC_MAGIC, IOC_RELEASE, IOC_RING_INFO,
    IOC_STAGE, IOC_VERSION, RELEASE_SIZE, RING_INFO_SIZE, STAGE_BORROW, STAGE_COPY, STAGE_READ,
    STAGE_SIZE, STAGED_PREFETCHED, Destination, RingInfo, StageResult, _iow, _iowr,
    _RELEASE_FMT, _RING_INFO_FMT, _STAGE_FMT, release, ring_info, stage)
from .cli import main
from .loader import (LoadReport, PlacedTensor, _parse_device, copy_mode_from_env,
                     cpu_mode_from_env, load, load_state_dict)
from .mount import Borrowed, Mount
from .plan import TensorInfo
from .stream import iter_weights

__all__ = [
    "BACKEND_NONE", "BACKEND_HOST", "BACKEND_CUDA",
    "HANDLE_NONE", "HANDLE_CUDA_IPC", "HANDLE_HOST_SHM",
    "STAGE_BORROW", "STAGE_COPY", "STAGE_READ", "STAGED_PREFETCHED",
    "IOC_RING_INFO", "IOC_STAGE", "IOC_RELEASE",
    "RING_INFO_SIZE", "STAGE_SIZE", "RELEASE_SIZE",
    "RingInfo", "StageResult", "Destination", "TensorInfo", "PlacedTensor",
    "Mount", "Borrowed", "LoadReport",
    "ring_info", "stage", "release", "copy_mode_from_env", "cpu_mode_from_env",
    "load_state_dict", "load", "iter_weights", "main",
]
