"""The shape of one MoE layer decode step: the key every kernel, workload and result row is indexed by."""

from __future__ import annotations

from dataclasses import asdict, dataclass

DTYPES = ("float32", "float16", "bfloat16")
BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)


def gib(nbytes: float) -> str:
    """A byte count as `N.NN GiB`: how moecal states every memory and disk need (a layer's experts against free
    device memory, a synthetic checkpoint's size), so the figures of one message compare at a glance."""
    return f"{nbytes / 2**30:.2f} GiB"


@dataclass(frozen=True)
class MoeShape:
    """One MoE layer in MLX affine format, as seen by a single decode token.

    `dtype` is the activation dtype (x, scales, biases, output); accumulation is always f32.
    """

    d_model: int
    dff: int
    n_experts: int
    top_k: int
    bits: int = 4
    group_size: int = 64
    dtype: str = "float32"

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError(f"invalid MoE shape {self.label()}: {'; '.join(problems)}")

    def problems(self) -> list[str]:
        """Why this shape cannot be stored in MLX affine format (empty when it can)."""
        out = []
        if self.bits not in BITS:
            out.append(f"bits must be one of {BITS}, got {self.bits}")
        if self.group_size not in GROUP_SIZES:
            out.append(f"group_size must be one of {GROUP_SIZES}, got {self.group_size}")
        if self.dtype not in DTYPES:
            out.append(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        for name in ("d_model", "dff"):
            value = getattr(self, name)
            if value <= 0 or value % self.group_size:
                out.append(f"{name}={value} must be a positive multiple of group_size={self.group_size}")
        if not 1 <= self.top_k <= self.n_experts:
            out.append(f"top_k={self.top_k} must be in 1..n_experts={self.n_experts}")
        return out

    def label(self) -> str:
        return (
            f"d{self.d_model}-f{self.dff}-e{self.n_experts}-k{self.top_k}-q{self.bits}g{self.group_size}-{self.dtype}"
        )

    def as_dict(self) -> dict:
        return asdict(self)

    def weight_bytes_per_step(self) -> int:
        """Bytes of packed weights + scales + biases that one decode step must read (top_k experts × 3 matrices).

        This is the traffic that bounds a decode MoE step, so GB/s = this / seconds is the kernel's efficiency.
        """
        act_bytes = 4 if self.dtype == "float32" else 2
        elems = 3 * self.d_model * self.dff
        packed = elems * self.bits // 8
        groups = elems // self.group_size
        return self.top_k * (packed + 2 * groups * act_bytes)

    def expert_bytes(self) -> int:
        """Bytes of all experts of one layer (what must sit in device memory)."""
        return self.weight_bytes_per_step() // self.top_k * self.n_experts
