"""Writing a planned synthetic checkpoint (harness.config.synth_checkpoints.Plan) with MLX, and the checks that go
with writing: free disk and memory, the staging folders a stopped writer left.

Tensors are streamed: each is generated, quantized and written shard by shard, so memory stays near one shard. The
folder appears atomically (written under a temporary name, then renamed): a crash leaves no half checkpoint. Here,
not in config/, because it writes: the plan is computed without a side effect, the writing is the sweep's (or
`moecal synth`'s) act.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.config import synth_checkpoints as synth
from harness.config.discover import read_synth_sidecar
from harness.config.shapes import gib
from harness.config.synth_checkpoints import DEFAULT_SHARD_BYTES, SIDECAR, Plan, Request
from harness.config.synth_layouts import TensorSpec
from harness.errors import InputError

PARTIAL = ".partial-"  # staging folders are `.<name>.partial-<pid>` until renamed into place


def _key(seed: int, name: str) -> object:
    """A PRNG key per (seed, tensor name): a layer's weights do not depend on how many layers were asked for."""
    import mlx.core as mx

    return mx.random.key(int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:4], "little"))


def _arrays(tensor: TensorSpec, quant: tuple[int, int] | None, dtype: str, seed: int) -> Iterator[tuple[str, object]]:
    """The stored arrays of one tensor (weight, or weight + scales + biases when quantized), generated and
    quantized one matrix (expert) at a time. Matrices are uniform in ±1/sqrt(fan-in), MLX's own nn.Linear
    initialisation, which keeps activations of order one through the layers, so greedy decoding of a random model
    stays finite in any dtype (and uniform numbers are ~4x cheaper to draw than normal ones on a CPU)."""
    import mlx.core as mx

    key = _key(seed, tensor.name)
    target = getattr(mx, dtype)
    if tensor.kind == "router_bias":
        yield tensor.name, mx.zeros(tensor.shape, dtype=mx.float32)
        return
    if tensor.kind == "norm":
        yield tensor.name, mx.ones(tensor.shape, dtype=target)
        return
    scale = 0.02 if tensor.kind == "bias" else (1.0 if tensor.kind == "embed" else tensor.shape[-1] ** -0.5)
    if tensor.kind == "conv":
        scale = tensor.shape[1] ** -0.5
    matrices = tensor.shape[0] if tensor.kind == "expert" else 1
    shape = tensor.shape[1:] if tensor.kind == "expert" else tensor.shape
    parts: list[tuple] = []
    for subkey in mx.random.split(key, matrices):
        values = mx.random.uniform(-scale, scale, shape, key=subkey).astype(target)
        stored = mx.quantize(values, group_size=quant[1], bits=quant[0]) if quant else (values,)
        mx.eval(*stored)
        parts.append(stored)
    stack = (lambda xs: mx.stack(xs)) if tensor.kind == "expert" else (lambda xs: xs[0])
    leaves = ("weight", "scales", "biases") if quant else (tensor.leaf,)
    for position, leaf in enumerate(leaves):
        array = stack([p[position] for p in parts])
        mx.eval(array)
        yield f"{tensor.module}.{leaf}", array


class _ShardWriter:
    """Accumulates arrays up to `limit` bytes per shard; names the shards once their count is known."""

    def __init__(self, folder: Path, limit: int):
        self.folder, self.limit = folder, limit
        self.pending: dict[str, object] = {}
        self.pending_bytes = 0
        self.shards: list[tuple[Path, list[str], int]] = []

    def add(self, name: str, array: object) -> None:
        size = array.nbytes  # type: ignore[attr-defined]
        if self.pending and self.pending_bytes + size > self.limit:
            self.flush()
        self.pending[name] = array
        self.pending_bytes += size

    def flush(self) -> None:
        import mlx.core as mx

        if not self.pending:
            return
        path = self.folder / f"shard-{len(self.shards):05d}.part.safetensors"
        try:
            mx.save_safetensors(str(path), self.pending, metadata={"format": "mlx"})
        except RuntimeError as exc:  # MLX reports a short write (disk full, file-size limit) as a RuntimeError
            raise OSError(errno.EIO, f"{exc} (disk full or a file-size limit?)", str(path)) from None
        self.shards.append((path, list(self.pending), self.pending_bytes))
        self.pending, self.pending_bytes = {}, 0

    def finish(self) -> list[str]:
        """Rename the shards (`model.safetensors` alone, else `model-0000i-of-0000n` + index); the file names."""
        self.flush()
        count = len(self.shards)
        names = (
            ["model.safetensors"]
            if count == 1
            else [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]
        )
        weight_map: dict[str, str] = {}
        for (path, tensors, _), name in zip(self.shards, names, strict=True):
            path.rename(self.folder / name)
            weight_map.update(dict.fromkeys(tensors, name))
        if count > 1:
            index = {"metadata": {"total_size": sum(s for *_, s in self.shards)}, "weight_map": weight_map}
            (self.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        return names


def write(
    plan_: Plan,
    request: Request,
    out_dir: Path,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write one planned checkpoint as `out_dir/<name>` (atomically); an existing folder with the same content hash
    is kept as it is, any other existing folder is refused."""
    target = out_dir / plan_.name
    if target.exists():
        existing = read_synth_sidecar(target)
        if existing and existing.get("content_hash") == plan_.sidecar["content_hash"]:
            return target
        raise InputError(str(target), "--out", "exists and is not this synthetic checkpoint: choose another --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / f".{plan_.name}{PARTIAL}{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        shards = _ShardWriter(staging, shard_bytes)
        for done, tensor in enumerate(plan_.specs):
            quant = plan_.quant.get(tensor.module) if tensor.leaf == "weight" else None  # a Linear's bias stays float
            for name, array in _arrays(tensor, quant, plan_.dtype, request.seed):
                shards.add(name, array)
            if progress:
                progress(done + 1, len(plan_.specs))
        shards.finish()
        (staging / "config.json").write_text(json.dumps(plan_.config, indent=2) + "\n", encoding="utf-8")
        for path in synth.non_weight_files(request.like):
            shutil.copy2(path, staging / path.name)
        (staging / SIDECAR).write_text(json.dumps(plan_.sidecar, indent=2) + "\n", encoding="utf-8")
        os.replace(staging, target)
    except OSError as exc:  # the error names the checkpoint asked for, not the staging folder
        raise OSError(exc.errno, f"not written, nothing kept: {exc.strerror or exc}", str(target)) from None
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
    return target


def leftover_partials(out_dir: Path, remove: bool = True) -> tuple[list[Path], list[Path]]:
    """(stale, kept): the staging folders of earlier synth runs in `out_dir`. One whose process is gone (killed,
    crashed, the machine rebooted) is stale, and removed when `remove`; one whose pid is running is kept (another
    synth may be writing it)."""
    removed, kept = [], []
    for folder in sorted(out_dir.glob(f".*{PARTIAL}*")) if out_dir.is_dir() else []:
        pid = folder.name.rpartition(PARTIAL)[2]
        if not pid.isdigit() or not folder.is_dir() or folder.is_symlink():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            if remove:
                shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
            continue
        except OSError:  # a process of another user holds the pid: running
            pass
        kept.append(folder)
    return removed, kept


def free_bytes(folder: Path) -> tuple[int, int]:
    """(free disk under `folder` or its nearest existing parent, available memory) — what a plan is checked against."""
    existing = next(p for p in (folder, *folder.resolve().parents) if p.exists())
    disk = shutil.disk_usage(existing).free
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        memory = int(fields["MemAvailable"].split()[0]) << 10
    except (OSError, KeyError, ValueError):
        memory = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return disk, memory


def check_fits(plans: list[Plan], out_dir: Path) -> None:
    """Refuse before writing when the checkpoints cannot fit on the disk, or one cannot be built in memory."""
    disk, memory = free_bytes(out_dir)
    needed = sum(p.disk_bytes for p in plans)
    if needed > disk:
        raise InputError(str(out_dir), "--out", f"needs {gib(needed)} on disk, {gib(disk)} free")
    peak = max(p.memory_bytes for p in plans)
    if peak > memory:
        raise InputError(str(out_dir), "memory", f"needs about {gib(peak)} of memory, {gib(memory)} available")
