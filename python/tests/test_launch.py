"""Kernel.launch's arguments, through the CUDA driver test double (KJIT_LIBCUDA).

The double records what cuLaunchKernel was asked: the kernel, dimensions, stream and the 8 bytes
at kernelParams[0] (fake_cuda_last_launch), so each launch here puts the argument under test
first; kjit._launch.Arguments, which builds kernelParams, is read directly for several at once.
The DLPack producers and __cuda_array_interface__ objects are made here: a DLPack capsule with
ctypes.pythonapi's PyCapsule_New over a DLManagedTensor laid out in ctypes memory, whose deleter
and capsule destructor count their calls.
"""

from __future__ import annotations

import ctypes
import gc
import os
import pathlib
import struct
import sys

import pytest

PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent
if os.environ.get("KJIT_TEST_INSTALLED") != "1":
    sys.path.insert(0, str(PYTHON_DIR))

import kjit  # noqa: E402
from kjit import _launch  # noqa: E402
from driver_double import open_driver_double  # noqa: E402

try:
    import numpy as np
except ImportError:  # python3-numpy (tests/run.sh installs it)
    np = None
needs_numpy = pytest.mark.skipif(np is None, reason="NumPy is not installed (Debian: python3-numpy)")

LIBCUDA = os.environ.get("KJIT_LIBCUDA")
SOURCE = "__global__ void scale(float *p, int n) { if (threadIdx.x < n) p[threadIdx.x] *= 2.0f; }\n"


class _Launch(ctypes.Structure):  # fake_cuda_launch
    _fields_ = [("kernel", ctypes.c_char_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_mem", ctypes.c_uint), ("stream", ctypes.c_void_p), ("first_param", ctypes.c_ulonglong),
                ("launches", ctypes.c_ulonglong)]


@pytest.fixture(scope="module")
def fake():
    lib = open_driver_double("fake_cuda_last_launch")
    lib.fake_cuda_last_launch.argtypes = [ctypes.POINTER(_Launch)]
    lib.fake_cuda_last_launch.restype = ctypes.c_int

    def last():
        out = _Launch()
        lib.fake_cuda_last_launch(ctypes.byref(out))
        return out

    lib.last = last
    return lib


@pytest.fixture(scope="module")
def kernel(fake, tmp_path_factory):
    cubin = kjit.compile(SOURCE, "scale", cache_dir=tmp_path_factory.mktemp("cache"), arch="sm_90")
    assert fake.cuInit(0) == 0
    ctx = ctypes.c_void_p()
    assert fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert fake.cuCtxSetCurrent(ctx) == 0
    k = kjit.load_cached(cubin, "scale")
    yield k
    k.release()
    fake.cuCtxSetCurrent(None)


def first_param(fake, kernel, args, **options):
    """Launches and returns what the driver got: (the first argument's 8 bytes, the record)."""
    before = fake.last().launches
    kernel.launch(1, 32, args, **options)
    last = fake.last()
    assert last.launches == before + 1
    return last.first_param, last


def not_launched(fake, kernel, args, error, match, **options):
    before = fake.last().launches
    with pytest.raises(error, match=match):
        kernel.launch(1, 32, args, **options)
    assert fake.last().launches == before  # refused before the driver


def param_bytes(arguments, index):
    return ctypes.string_at(arguments.params[index], ctypes.sizeof(arguments.values[index]))


# --------------------------------------------------------------------------------------------
# Numbers

@needs_numpy
def test_numpy_scalars_pass_their_own_bytes(fake, kernel):
    scalars = [np.bool_(True), np.int8(-3), np.uint8(250), np.int16(-30000), np.uint16(65000), np.int32(-7),
               np.uint32(4_000_000_000), np.int64(-(2**40)), np.uint64(2**63 + 5), np.float16(1.5),
               np.float32(-2.25), np.float64(1e300), np.complex64(1 + 2j), np.complex128(3 - 4j)]
    arguments = _launch.Arguments(scalars, 0)
    for i, value in enumerate(scalars):
        assert ctypes.sizeof(arguments.values[i]) == value.itemsize, value.dtype  # never widened
        assert param_bytes(arguments, i) == value.tobytes(), value.dtype
    # Through the driver: a float32 is its 4 bytes (the double reads 8; ctypes zero-fills the rest).
    param, _ = first_param(fake, kernel, [np.float32(-2.25), np.int32(4)])
    assert param == struct.unpack("<I", struct.pack("<f", -2.25))[0]
    param, _ = first_param(fake, kernel, [np.float16(1.5)])
    assert param == struct.unpack("<H", np.float16(1.5).tobytes())[0]
    # numpy.float64 is a Python float too: it is taken by its dtype, not refused.
    param, _ = first_param(fake, kernel, [np.float64(0.5)])
    assert param == struct.unpack("<Q", struct.pack("<d", 0.5))[0]


@needs_numpy
def test_numpy_scalars_without_a_kernel_type_are_refused(fake, kernel):
    for value in (np.longdouble(1), np.str_("x"), np.datetime64("2024-01-01")):
        not_launched(fake, kernel, [ctypes.c_void_p(0), value], TypeError, r"kernel argument 1: numpy\.")


def test_python_numbers_and_other_objects_are_refused(fake, kernel):
    for value in (5, 2.5, True, 1j):
        not_launched(fake, kernel, [ctypes.c_void_p(0), value], TypeError, "kernel argument 1: .* has no C type")
    not_launched(fake, kernel, [object()], TypeError, "kernel argument 0: builtins.object is not a kernel argument")
    not_launched(fake, kernel, [None], TypeError, "kernel argument 0: builtins.NoneType")


def test_ctypes_values_structures_and_pointers_pass_as_they_are(fake, kernel):
    class Pair(ctypes.Structure):
        _fields_ = [("a", ctypes.c_int32), ("b", ctypes.c_int32)]

    param, _ = first_param(fake, kernel, [Pair(7, -1)])
    assert param == struct.unpack("<Q", struct.pack("<ii", 7, -1))[0]
    target = ctypes.c_int(3)
    pointer = ctypes.pointer(target)
    param, _ = first_param(fake, kernel, [pointer])
    assert param == ctypes.addressof(target)
    arguments = _launch.Arguments([ctypes.c_uint8(9), Pair(1, 2)], 0)
    assert param_bytes(arguments, 0) == b"\x09" and param_bytes(arguments, 1) == struct.pack("<ii", 1, 2)


def test_bad_dimensions_shared_memory_and_readonly_are_refused(fake, kernel):
    not_launched(fake, kernel, [ctypes.c_void_p(0)], ValueError, "shared_mem", shared_mem=-1)
    not_launched(fake, kernel, [ctypes.c_void_p(0)], ValueError, "shared_mem", shared_mem=True)
    not_launched(fake, kernel, [ctypes.c_void_p(0)], TypeError, "readonly", readonly="0")
    not_launched(fake, kernel, [ctypes.c_void_p(0)], TypeError, "readonly", readonly=5)
    _, last = first_param(fake, kernel, [ctypes.c_void_p(0)], shared_mem=np.uint16(512) if np else 512)
    assert last.shared_mem == 512


# --------------------------------------------------------------------------------------------
# __cuda_array_interface__

class Array:
    def __init__(self, pointer, version=3, readonly=False, **extra):
        self.__cuda_array_interface__ = {"data": (pointer, readonly), "shape": (4,), "typestr": "<f4",
                                         "version": version, **extra}


def test_array_interface_versions_0_to_3(fake, kernel):
    for version in range(4):
        param, _ = first_param(fake, kernel, [Array(0x7000_0000 + version, version)])
        assert param == 0x7000_0000 + version
    not_launched(fake, kernel, [ctypes.c_int(1), Array(0x7000, 4)], TypeError, "kernel argument 1: .*version 4")
    broken = Array(0x7000)
    del broken.__cuda_array_interface__["version"]
    not_launched(fake, kernel, [broken], TypeError, "kernel argument 0: .*lacks 'version'")
    not_launched(fake, kernel, [Array("0x7000")], TypeError, "data pointer of type str")
    not_launched(fake, kernel, [Array(0x7000, mask=Array(0x8000))], TypeError, "kernel argument 0: .*mask")


def test_a_read_only_array_only_where_the_kernel_only_reads(fake, kernel):
    readonly = Array(0x7100, readonly=True)
    not_launched(fake, kernel, [ctypes.c_int(1), readonly], ValueError,
                 r"kernel argument 1: .*read-only.*readonly=\{1\}")
    not_launched(fake, kernel, [readonly], ValueError, "read-only", readonly={1})
    assert first_param(fake, kernel, [readonly], readonly={0})[0] == 0x7100
    assert first_param(fake, kernel, [readonly], readonly=True)[0] == 0x7100


def test_array_interface_stream_is_synchronized_unless_launched_on(fake, kernel):
    class Recorder:
        def __init__(self):
            self.synchronized = []

        def synchronize(self, stream, what):
            self.synchronized.append(stream)

    # Which streams kjit waits for, before the launch: the array's own, once, unless the launch
    # is on it (0 and 1 are both the legacy default stream).
    recorder = Recorder()
    args = [Array(1, stream=0x500), Array(2, stream=0x500), Array(3, stream=0x4000), Array(4, stream=1),
            Array(5, stream=None), Array(6, version=2, stream=0x600)]
    _launch.Arguments(args, 0x4000, get_driver=lambda: recorder)
    assert recorder.synchronized == [0x500, 1]
    recorder.synchronized.clear()
    _launch.Arguments([Array(1, stream=1), Array(2, stream=0x4000)], 0, get_driver=lambda: recorder)
    assert recorder.synchronized == [0x4000]
    with pytest.raises(ValueError, match="kernel argument 0: .*stream 0"):
        _launch.Arguments([Array(1, stream=0)], 0, get_driver=lambda: recorder)
    # Through the driver, on the array's stream: nothing to wait for.
    _, last = first_param(fake, kernel, [Array(0x7200, stream=0x4000)], stream=0x4000)
    assert last.stream == 0x4000


def test_array_interface_stream_waits_through_the_driver(fake, kernel):
    if not hasattr(fake, "fake_cuda_stream_syncs"):
        pytest.skip(f"{LIBCUDA}: this driver test double has no cuStreamSynchronize (built before it)")
    fake.fake_cuda_stream_syncs.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    fake.fake_cuda_stream_syncs.restype = ctypes.c_ulonglong
    stream = ctypes.c_void_p()
    before = fake.fake_cuda_stream_syncs(None)
    param, last = first_param(fake, kernel, [Array(0x7300, stream=0x500)], stream=0x4000)
    assert param == 0x7300 and last.stream == 0x4000
    assert fake.fake_cuda_stream_syncs(ctypes.byref(stream)) == before + 1 and stream.value == 0x500


# --------------------------------------------------------------------------------------------
# DLPack

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", ctypes.c_uint8 * 4), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, CAPSULE_DESTRUCTOR)(
    ("PyCapsule_New", ctypes.pythonapi))
capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
capsule_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))


class Producer:
    """A DLPack producer as the spec has it: __dlpack_device__, and __dlpack__ exporting a new
    capsule each call, whose destructor calls the tensor's deleter unless a consumer renamed
    it. ``deleted`` counts deleter calls; ``seen`` holds each __dlpack__ call's arguments."""

    NAMES = {False: b"dltensor", True: b"dltensor_versioned"}

    def __init__(self, fake, data, byte_offset=0, device=(2, 0), versioned=True, legacy_signature=False,
                 flags=0, major=1, name=None):
        self.fake, self.data, self.byte_offset, self.device = fake, data, byte_offset, device
        self.versioned, self.legacy_signature, self.flags, self.major = versioned, legacy_signature, flags, major
        self.name = name
        self.deleted, self.deleted_after_launches, self.seen, self._keep = 0, [], [], []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, **kwargs):
        if self.legacy_signature and kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument")
        self.seen.append(dict(stream=stream, **kwargs))
        versioned = self.versioned and not self.legacy_signature
        managed = (DLManagedTensorVersioned if versioned else DLManagedTensor)()
        tensor = managed.dl_tensor
        tensor.data, tensor.byte_offset = self.data, self.byte_offset
        tensor.device.device_type, tensor.device.device_id = self.device
        if versioned:
            managed.major, managed.flags = self.major, self.flags

        def deleter(_address):
            self.deleted += 1
            self.deleted_after_launches.append(self.fake.last().launches)

        unused = self.NAMES[versioned]

        def destructor(capsule):  # the producer's: the deleter, unless the tensor was consumed
            if capsule_is_valid_raw(capsule, unused):
                managed.deleter(ctypes.addressof(managed))

        managed.deleter = DELETER(deleter)
        name = self.name or unused  # a capsule keeps a pointer to its name
        callbacks = (managed, managed.deleter, CAPSULE_DESTRUCTOR(destructor), name)
        self._keep.append(callbacks)  # alive as long as this producer
        return capsule_new(ctypes.addressof(managed), name, callbacks[2])


def test_dlpack_device_pointer_and_its_release_after_the_launch(fake, kernel):
    producer = Producer(fake, 0x9000_0000, byte_offset=64)
    param, last = first_param(fake, kernel, [producer, ctypes.c_int(4)], stream=0x4000)
    assert param == 0x9000_0040
    # Exported for the launch's stream as DLPack 1.0, never as a copy; deleted once, after it.
    assert producer.seen == [{"stream": 0x4000, "max_version": (1, 0), "copy": False}]
    assert producer.deleted == 1 and producer.deleted_after_launches == [last.launches]
    gc.collect()
    assert producer.deleted == 1  # consumed: the capsule's destructor left it alone
    # On the default stream: the protocol's 1 (legacy default), never 0.
    first_param(fake, kernel, [producer])
    assert producer.seen[-1]["stream"] == 1 and producer.deleted == 2


def test_dlpack_before_1_0(fake, kernel):
    producer = Producer(fake, 0x9100_0000, legacy_signature=True)
    param, _ = first_param(fake, kernel, [producer])
    assert param == 0x9100_0000
    assert producer.seen == [{"stream": 1}] and producer.deleted == 1
    gc.collect()
    assert producer.deleted == 1


def test_dlpack_host_and_other_devices_are_refused_before_export(fake, kernel):
    for device, where in (((1, 0), "host memory"), ((10, 0), "kDLROCM")):
        producer = Producer(fake, 0x9200_0000, device=device)
        not_launched(fake, kernel, [ctypes.c_int(1), producer], TypeError,
                     f"kernel argument 1: Producer is in .*{where}")
        assert producer.seen == []  # nothing exported
    # A PyTorch-like tensor says where it is too.
    class CpuTensor:
        def data_ptr(self):
            return 0x1234

        def __dlpack_device__(self):
            return (1, 0)

    not_launched(fake, kernel, [CpuTensor()], TypeError, "kernel argument 0: CpuTensor is in host memory")
    # Managed and pinned memory are the GPU's to address.
    for device_type in (3, 13):
        assert first_param(fake, kernel, [Producer(fake, 0x9300_0000, device=(device_type, 0))])[0] == 0x9300_0000


def test_dlpack_tensors_refused_after_export_are_not_consumed(fake, kernel):
    cases = [(Producer(fake, 0x9400_0000, flags=1), ValueError, "read-only"),  # DLPACK_FLAG_BITMASK_READ_ONLY
             (Producer(fake, 0x9400_0000, flags=2), ValueError, "copy"),  # IS_COPIED
             (Producer(fake, 0x9400_0000, major=2), TypeError, "DLPack 2.0"),
             (Producer(fake, 0x9400_0000, name=b"used_dltensor"), TypeError, "not an unused DLPack tensor")]
    for producer, error, match in cases:
        not_launched(fake, kernel, [producer], error, f"kernel argument 0: .*{match}")
        gc.collect()
        # Left to its capsule, whose destructor deletes it (a used capsule's never does).
        assert producer.deleted == (0 if producer.name else 1), match
    readonly = Producer(fake, 0x9500_0000, flags=1)
    assert first_param(fake, kernel, [readonly], readonly=[0])[0] == 0x9500_0000 and readonly.deleted == 1


def test_consumed_tensors_are_released_when_a_later_argument_is_refused(fake, kernel):
    producer = Producer(fake, 0x9600_0000)
    before = fake.last().launches
    not_launched(fake, kernel, [producer, 5], TypeError, "kernel argument 1")
    assert producer.deleted == 1 and producer.deleted_after_launches == [before]
    gc.collect()
    assert producer.deleted == 1


def test_the_capsule_is_renamed_as_the_protocol_says(fake, kernel):
    producer = Producer(fake, 0x9700_0000)
    capsules = []
    export = producer.__dlpack__

    def keep(**kwargs):
        capsules.append(export(**kwargs))
        return capsules[-1]

    producer.__dlpack__ = keep
    first_param(fake, kernel, [producer])
    assert capsule_is_valid(capsules[0], b"used_dltensor_versioned") == 1
    del capsules[:]
    gc.collect()
    assert producer.deleted == 1
