import platform
import subprocess
import sys

import pytest

from d2lrepro.core import allocator

# Frees a 20 MB block and prints how many free bytes the heap kept (glibc's mallinfo2).
FREED_AND_KEPT = """
import ctypes, sys
if sys.argv[1] == "package":
    import d2lrepro
libc = ctypes.CDLL("libc.so.6")
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(20 << 20))
print(libc.mallinfo2().fordblks)
"""


def kept_after_free(kind: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", FREED_AND_KEPT, kind], capture_output=True, text=True, check=True
    )
    return int(done.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's malloc only")
def test_a_process_that_imports_the_package_keeps_freed_blocks_for_reuse():
    assert allocator.retain_freed_memory()
    # glibc's defaults map a 20 MB block on its own and unmap it when freed; the package's
    # settings take it from the heap and keep it there for the next step's tensors
    assert kept_after_free("default") < 20 << 20 <= kept_after_free("package")
