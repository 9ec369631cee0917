"""The C allocator's settings for this process.

PyTorch on the CPU frees and allocates the same activation and gradient buffers at every
training step. glibc's malloc, by default, hands large freed blocks back to the kernel (unmaps
them, or trims the heap) and takes them again at the next step, so every step pays for fresh,
zero-filled pages: about 10,000 page faults per step of the from-scratch LeNet at batch 256,
and 10 to 20% of its time on one core of the 2-core machine. Fixed thresholds keep those
blocks in the process for reuse. Other C libraries (macOS, musl) are left as they are.
"""

from __future__ import annotations

import ctypes

# mallopt's parameter numbers (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap, not from their own mapping: glibc's maximum on
# 64-bit systems, above the from-scratch LeNet's largest activation (14 MB at batch 256).
MMAP_THRESHOLD = 32 << 20
# Free memory at the top of the heap is returned to the kernel only beyond this much.
TRIM_THRESHOLD = 256 << 20


def retain_freed_memory() -> bool:
    """Make glibc keep freed blocks for reuse; False where the C library has no ``mallopt``.
    Both thresholds must be set: fixing one alone turns off glibc's adaptive thresholds and
    makes it slower than its default."""
    # The symbols already loaded into the process (the C library's among them): no search
    # for the library file, which would start a subprocess at every import of the package.
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallopt"):
        return False
    return bool(
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
