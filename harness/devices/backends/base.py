"""The small interface every backend implements, so workloads and `verify` never special-case a device."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.devices.quant_layer import QuantLayer

# A path computes one MoE decode step: (x, indices, scores, device_layer) -> output vector of d_model.
Path = Callable[[Any, Any, Any, Any], Any]


class Backend(ABC):
    """A device family. Arrays passed between methods are the backend's own (mx.array, cupy.ndarray, np.ndarray)."""

    name: str = ""

    @classmethod
    @abstractmethod
    def availability(cls) -> tuple[bool, str]:
        """(usable, reason). Must not raise and must not need the device to exist to be called."""

    @abstractmethod
    def device_name(self) -> str:
        """Human-readable device, e.g. 'NVIDIA H200 (driver 580.82, CUDA 13.0)'."""

    @abstractmethod
    def device_info(self) -> dict[str, str]:
        """Provenance fields for meta.json (gpu, driver, cuda/metal versions, package versions)."""

    @abstractmethod
    def memory_info(self) -> tuple[int, int]:
        """(free_bytes, total_bytes) of the memory the layer weights live in."""

    @abstractmethod
    def cache_bytes(self) -> int:
        """Size of the last-level cache weights could hide in; workloads rotate over more than this."""

    @abstractmethod
    def upload(self, layer: QuantLayer) -> Any:
        """Copy a host layer to the device in the backend's native layout; returns an opaque device layer."""

    @abstractmethod
    def upload_inputs(self, x: np.ndarray, indices: np.ndarray, scores: np.ndarray, dtype: str) -> tuple:
        """Copy one token's inputs to the device: x in the activation dtype, indices int32, scores f32."""

    @abstractmethod
    def paths(self) -> dict[str, Path]:
        """Named paths: at least 'fused' and 'fallback'; optionally 'library' (e.g. mx.gather_qmm on CPU)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until queued device work is done, so a host timer measures the work itself."""

    @abstractmethod
    def to_numpy(self, array: Any) -> np.ndarray:
        """Device array -> float64 numpy (for comparing with the reference)."""

    @abstractmethod
    def copy_bandwidth(self, nbytes: int = 1 << 30) -> float:
        """Measured bytes/s (read + written) of a large device-to-device copy: the memory ceiling GB/s is judged by."""
