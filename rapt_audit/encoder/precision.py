"""Which precision a run's networks compute in: bfloat16 where the hardware has it, float32 elsewhere.

Issue #29: on the project's 2-core CPU (AMD EPYC with AVX-512 BF16) a prompt-tuning step of MiniLM
took 219 ms under ``torch.autocast("cpu", dtype=torch.bfloat16)`` against 440 ms in float32, while a
CPU without native bfloat16 emulates it and runs *slower* (3–4× in an earlier measurement). So
``auto``, the default, resolves per machine: ``bf16`` on a GPU that supports it and on a CPU that
reports AVX-512 BF16 or AMX, ``fp32`` everywhere else. ``fp32`` and ``bf16`` force one.

Mixed precision, not half-precision weights: parameters, gradients and optimizer state stay
float32, and only the products inside the autocast region run in bfloat16
(:func:`rapt_audit.utility.on_device.autocast`). The privacy mechanisms never run under it: noise,
nearest-neighbour search and the released vectors are computed in float32/float64 as before.
"""

from __future__ import annotations

import functools
from pathlib import Path

#: What a run may ask for: ``auto`` (resolved by :func:`resolve_precision`), or one of the two precisions.
PRECISION_CHOICES = ("auto", "fp32", "bf16")

#: CPU flags (Linux ``/proc/cpuinfo``) of native bfloat16 arithmetic: AVX-512 BF16 (AMD Zen 4+, Intel
#: Cooper Lake, Sapphire Rapids) and AMX's bfloat16 tiles (Intel Sapphire Rapids and later).
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def check_precision_choice(value: str) -> str:
    """Return ``value`` if it is ``auto``, ``fp32`` or ``bf16``; else raise ValueError listing them."""
    if value not in PRECISION_CHOICES:
        raise ValueError(f"precision={value!r} is not one of {', '.join(PRECISION_CHOICES)}")
    return value


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes bfloat16 products natively (AVX-512 BF16 or AMX).

    Read from ``/proc/cpuinfo`` without importing torch; where that file does not exist (macOS,
    Windows), torch's own CPU feature checks answer.
    """
    path = Path(cpuinfo)
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("flags"):
                return bool(BF16_CPU_FLAGS & set(line.partition(":")[2].split()))
        return False
    import torch  # lazy (torch)

    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(bool(check()) for check in checks if check is not None)


def resolve_precision(requested: str, device: str) -> str:
    """``auto`` → ``bf16`` where ``device`` computes bfloat16 natively, else ``fp32``; the others as given.

    Args:
        requested: ``auto``, ``fp32`` or ``bf16``.
        device: A resolved device, ``cpu`` or ``cuda`` (``cuda:N``).
    """
    if check_precision_choice(requested) != "auto":
        return requested
    if str(device).startswith("cuda"):
        import torch  # lazy (torch)

        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_native_bf16() else "fp32"


__all__ = ["BF16_CPU_FLAGS", "PRECISION_CHOICES", "check_precision_choice", "cpu_has_native_bf16",
           "resolve_precision"]
