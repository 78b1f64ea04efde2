"""A Python process and the C ABI share the same seats (ctypes loads
libshmsem.so.0, as any FFI would)."""

import ctypes
import os

import pytest

import shmsem


@pytest.fixture
def libshmsem():
    path = os.environ.get("SHMSEM_LIBRARY")
    if not path:
        pytest.skip("SHMSEM_LIBRARY is not set (ctest sets it)")
    lib = ctypes.CDLL(path)
    lib.shmsem_open.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p)]
    lib.shmsem_try_acquire.argtypes = [ctypes.c_void_p, ctypes.c_uint32,
                                       ctypes.POINTER(ctypes.c_void_p)]
    lib.shmsem_release.argtypes = [ctypes.c_void_p]
    lib.shmsem_used.argtypes = [ctypes.c_void_p]
    lib.shmsem_used.restype = ctypes.c_int64
    lib.shmsem_close.argtypes = [ctypes.c_void_p]
    lib.shmsem_last_error.restype = ctypes.c_char_p
    return lib


def test_c_and_python_share_seats(key, libshmsem):
    s = shmsem.Semaphore(key, permits=2)
    c_sem = ctypes.c_void_p()
    assert libshmsem.shmsem_open(key.encode(), 2, ctypes.byref(c_sem)) == 0
    c_permit = ctypes.c_void_p()
    assert libshmsem.shmsem_try_acquire(c_sem, 1, ctypes.byref(c_permit)) == 0
    assert s.used == 1
    with s.acquire():
        assert libshmsem.shmsem_used(c_sem) == 2
        other = ctypes.c_void_p()
        assert libshmsem.shmsem_try_acquire(c_sem, 1, ctypes.byref(other)) == -2  # EUNAVAILABLE
        assert key.encode() in libshmsem.shmsem_last_error()
    assert libshmsem.shmsem_release(c_permit) == 0
    assert s.used == 0
    libshmsem.shmsem_close(c_sem)
