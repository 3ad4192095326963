"""Tests of kjit.cuda_core (python/kjit/cuda_core.py) against the real cuda-core from PyPI.

tests/cuda_core_test.sh (the ctest python_cuda_core) installs cuda-core into a venv in the build
tree and runs this file with KJIT_TEST_REQUIRE_CUDA_CORE=1, so that a missing cuda.core fails.
Elsewhere (python_module's run with the system python) the file is skipped, saying why.

Environment, as test_kjit.py: KJIT_LIBRARY, KJIT_LIBCUDA (the CUDA driver test double: cuda.core
loads through it too, for get_kernel and Kernel.as_cuda_core). No GPU is needed: cubins are made
for sm_90 into temporary caches. With KJIT_TEST_GPU=1 (the ctest python_cuda_core_gpu, label
`gpu`) the driver is the real one, cubins are made for the GPU's arch, the double's tests skip,
and kernels compiled here are launched through cuda.core and their output checked.
"""

import ctypes
import gc
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import weakref

import pytest

PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent
if os.environ.get("KJIT_TEST_INSTALLED") != "1":
    sys.path.insert(0, str(PYTHON_DIR))

GPU = os.environ.get("KJIT_TEST_GPU") == "1"
LIBCUDA = None if GPU else os.environ.get("KJIT_LIBCUDA")
try:
    import cuda.core  # noqa: F401
except ImportError as e:
    if os.environ.get("KJIT_TEST_REQUIRE_CUDA_CORE") == "1":
        raise
    pytest.skip(f"cuda.core is not installed ({e}); the ctest python_cuda_core runs this file with cuda-core "
                "from PyPI", allow_module_level=True)

from cuda.core import ObjectCode, Program, ProgramOptions  # noqa: E402

if LIBCUDA:
    # cuda.bindings opens "libcuda.so.1" by name when it first calls the driver: the double,
    # loaded first, is the one it gets.
    ctypes.CDLL(LIBCUDA, mode=ctypes.RTLD_GLOBAL)

import kjit  # noqa: E402
import kjit.cuda_core  # noqa: E402

needs_double = pytest.mark.skipif(not LIBCUDA, reason="no driver test double (KJIT_LIBCUDA unset, or KJIT_TEST_GPU=1)")
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a GPU: KJIT_TEST_GPU=1 (the ctest python_cuda_core_gpu)")

SOURCE = textwrap.dedent("""\
    #ifndef FACTOR
    #error "ProgramOptions.define_macro did not arrive"
    #endif
    template <int N> __global__ void scale(float *p) { p[threadIdx.x] *= N * FACTOR; }
    namespace ops { template <typename T> __global__ void fill(T *p, T v) { p[threadIdx.x] = v; } }
    __global__ void plain(float *p) { p[0] = 1.0f; }
    extern "C" __global__ void c_kernel(float *p) { p[0] = 2.0f; }
    """)
SCALE3 = b"_Z5scaleILi3EEvPf"
if GPU:  # cubins the GPU can load
    from cuda.core import Device  # noqa: E402
    ARCH = f"sm_{Device().arch}"
else:
    ARCH = "sm_90"


def options(**fields):
    return ProgramOptions(arch=ARCH, define_macro=("FACTOR", "2"), name="kjit-test", **fields)


def delta(before, after, *counters):
    return {c: after[c] - before[c] for c in counters}


def cubin_of(cache, expression, opts):
    """The path of the cache entry kjit.cuda_core.compile used (a hit of the same request)."""
    text = expression.decode() if isinstance(expression, bytes) else expression
    return kjit.compile_named(SOURCE, kjit.cuda_core.keyword_of(text), cache_dir=cache, name_expression=text,
                              **kjit.cuda_core.kjit_options(opts)).cubin_path


@pytest.fixture(scope="module")
def driver():
    """The double (or the GPU's driver), initialised as cuda.core expects an application to."""
    from cuda.bindings import driver as cu
    (result,) = cu.cuInit(0)
    assert result == cu.CUresult.CUDA_SUCCESS, result
    return cu


@pytest.fixture(scope="module")
def fake():
    lib = ctypes.CDLL(LIBCUDA)
    lib.fake_cuda_kernel_name.restype = ctypes.c_char_p
    lib.fake_cuda_kernel_name.argtypes = [ctypes.c_void_p]
    return lib


def test_miss_then_hit_keep_the_symbol_mapping(tmp_path):
    before = kjit.stats()
    miss = kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), cache_dir=tmp_path)
    middle = kjit.stats()
    hit = kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), cache_dir=tmp_path)
    after = kjit.stats()
    assert delta(before, middle, "nvrtc_compiles", "compile_misses") == {"nvrtc_compiles": 1, "compile_misses": 1}
    assert delta(middle, after, "nvrtc_compiles", "compile_hits") == {"nvrtc_compiles": 0, "compile_hits": 1}
    for code in (miss, hit):
        assert isinstance(code, ObjectCode)
        assert code.code_type == "cubin"
        assert code.name == "kjit-test"
        assert code.symbol_mapping == {"scale<3>": SCALE3}
        assert bytes(code.code) == pathlib.Path(cubin_of(tmp_path, "scale<3>", options())).read_bytes()


def test_symbol_mapping_is_what_cuda_core_program_gives(tmp_path):
    # cuda.core's own compile (its NVRTC) of the same request: the same keys, the same bytes values.
    for expression in ("scale<3>", b"ops::fill<int>", "&scale<5>"):
        ours = kjit.cuda_core.compile(SOURCE, options(), (expression,), cache_dir=tmp_path)
        theirs = Program(SOURCE, "c++", options()).compile("cubin", name_expressions=(expression,))
        assert ours.symbol_mapping == theirs.symbol_mapping
        # The program is named as cuda.core names it (ProgramOptions.name): the very cubin.
        assert bytes(ours.code) == bytes(theirs.code)


def test_hit_in_a_fresh_process_runs_no_nvrtc(tmp_path, driver):
    miss = kjit.cuda_core.compile(SOURCE, options(), ("ops::fill<float>",), cache_dir=tmp_path)
    child = textwrap.dedent("""\
        import ctypes, dataclasses, hashlib, json, os, sys
        if os.environ.get("KJIT_LIBCUDA") and os.environ.get("KJIT_TEST_GPU") != "1":
            ctypes.CDLL(os.environ["KJIT_LIBCUDA"], mode=ctypes.RTLD_GLOBAL)
        sys.path.insert(0, sys.argv[2])
        from cuda.bindings import driver
        driver.cuInit(0)
        from cuda.core import ProgramOptions
        import kjit, kjit.cuda_core
        opts = ProgramOptions(arch=sys.argv[3], define_macro=("FACTOR", "2"), name="kjit-test")
        code = kjit.cuda_core.compile(sys.stdin.read(), opts, ("ops::fill<float>",), cache_dir=sys.argv[1])
        kernel = code.get_kernel("ops::fill<float>")
        maps = open("/proc/self/maps").read()
        print(json.dumps({"stats": dataclasses.asdict(kjit.stats()), "code": hashlib.sha256(bytes(code.code)).hexdigest(),
                          "mapping": {k: v.decode() for k, v in code.symbol_mapping.items()},
                          "handle": int(kernel.handle), "nvrtc_mapped": "libnvrtc.so" in maps}))
        """)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    run = subprocess.run([sys.executable, "-c", child, str(tmp_path), str(PYTHON_DIR), ARCH], input=SOURCE,
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["stats"]["compile_hits"] == 1
    assert out["stats"]["nvrtc_compiles"] == 0
    assert not out["nvrtc_mapped"], "a hit-only process loaded NVRTC"
    assert out["mapping"] == {"ops::fill<float>": "_ZN3ops4fillIfEEvPT_S1_"}
    assert out["code"] == hashlib.sha256(bytes(miss.code)).hexdigest()
    assert out["handle"] != 0


@needs_double
def test_get_kernel_finds_the_lowered_name(tmp_path, driver, fake):
    code = kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), cache_dir=tmp_path)
    kernel = code.get_kernel("scale<3>")
    assert fake.fake_cuda_kernel_name(int(kernel.handle)) == SCALE3


@needs_double
def test_without_a_name_expression_the_keyword_is_mapped(tmp_path, driver, fake):
    code = kjit.cuda_core.compile(SOURCE, options(), keyword="plain", cache_dir=tmp_path)
    assert code.symbol_mapping == {"plain": b"_Z5plainPf"}
    assert fake.fake_cuda_kernel_name(int(code.get_kernel("plain").handle)) == b"_Z5plainPf"
    # An extern "C" kernel's name is its keyword: nothing to map.
    code = kjit.cuda_core.compile(SOURCE, options(), keyword="c_kernel", cache_dir=tmp_path)
    assert code.symbol_mapping == {}
    assert fake.fake_cuda_kernel_name(int(code.get_kernel("c_kernel").handle)) == b"c_kernel"


def test_compile_each_one_entry_per_name_expression(tmp_path):
    expressions = ("scale<1>", "scale<2>", b"ops::fill<double>", "scale<1>")
    before = kjit.stats()
    codes = kjit.cuda_core.compile_each(SOURCE, options(), expressions, cache_dir=tmp_path, workers=2)
    middle = kjit.stats()
    again = kjit.cuda_core.compile_each(SOURCE, options(), expressions, cache_dir=tmp_path)
    after = kjit.stats()
    assert list(codes) == ["scale<1>", "scale<2>", b"ops::fill<double>"]  # in order, the repeat merged
    assert middle["nvrtc_compiles"] - before["nvrtc_compiles"] == 3
    assert after["nvrtc_compiles"] - middle["nvrtc_compiles"] == 0
    assert codes[b"ops::fill<double>"].symbol_mapping == {b"ops::fill<double>": b"_ZN3ops4fillIdEEvPT_S1_"}
    assert codes["scale<2>"].symbol_mapping == {"scale<2>": b"_Z5scaleILi2EEvPf"}
    for expression, code in codes.items():
        assert again[expression].symbol_mapping == code.symbol_mapping
        assert bytes(code.code) == pathlib.Path(cubin_of(tmp_path, expression, options())).read_bytes()


def test_compile_error_carries_nvrtc_log(tmp_path):
    broken = SOURCE + "this is not C++;\n"
    with pytest.raises(kjit.CompileError, match="kjit-test"):
        kjit.cuda_core.compile(broken, options(), ("scale<3>",), cache_dir=tmp_path)
    with pytest.raises(kjit.CompileError, match="name expression 'scale<4>'.*kjit-test"):
        kjit.cuda_core.compile_each(broken, options(), ("scale<4>",), cache_dir=tmp_path)
    with pytest.raises(kjit.CompileError, match="#error"):  # no FACTOR: the options are what NVRTC got
        kjit.cuda_core.compile(SOURCE, ProgramOptions(arch=ARCH), ("scale<3>",), cache_dir=tmp_path)


def test_program_options_reach_nvrtc_and_headers_enter_the_key(tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    header = include / "factor.h"
    header.write_text("#define FACTOR 3\n")
    source = '#include "factor.h"\n' + SOURCE
    opts = ProgramOptions(arch=ARCH, include_path=[str(include)], std="c++17", max_register_count=32)
    assert kjit.cuda_core.kjit_options(opts) == {
        "arch": ARCH, "nvrtc_options": ["--maxrregcount=32", f"--include-path={include}", "--std=c++17"]}
    cache = tmp_path / "cache"
    first = kjit.cuda_core.compile(source, opts, ("scale<3>",), cache_dir=cache)
    header.write_text("#define FACTOR 4\n")  # cuda.core's own cache needs an extra_digest for this
    before = kjit.stats()
    edited = kjit.cuda_core.compile(source, opts, ("scale<3>",), cache_dir=cache)
    header.write_text("#define FACTOR 3\n")
    reverted = kjit.cuda_core.compile(source, opts, ("scale<3>",), cache_dir=cache)
    after = kjit.stats()
    assert bytes(edited.code) != bytes(first.code)
    assert bytes(reverted.code) == bytes(first.code)
    assert delta(before, after, "nvrtc_compiles", "compile_hits") == {"nvrtc_compiles": 1, "compile_hits": 1}


def test_a_repeat_gives_the_same_object_code_while_the_cubin_file_is_the_same(tmp_path):
    first = kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), cache_dir=tmp_path)
    good = bytes(first.code)
    assert kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), cache_dir=tmp_path) is first
    # Another program name: another request, entry and ObjectCode.
    other = kjit.cuda_core.compile(SOURCE, ProgramOptions(arch=ARCH, define_macro=("FACTOR", "2"), name="other"),
                                   ("scale<3>",), cache_dir=tmp_path)
    assert other is not first and other.name == "other" and first.name == "kjit-test"
    # The file replaced: libkjit proves the entry changed and rebuilds it, at the same path; the
    # ObjectCode made from the old file is not given for the new one.
    path = pathlib.Path(kjit.cuda_core._prepare(SOURCE, options(), ("scale<3>",), None, tmp_path, {})[0].compile())
    assert path.read_bytes() == good
    path.write_bytes(b"junk")
    before = kjit.stats()
    rebuilt = kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), cache_dir=tmp_path)
    assert kjit.stats()["nvrtc_compiles"] == before["nvrtc_compiles"] + 1
    assert rebuilt is not first and bytes(rebuilt.code) == path.read_bytes() == good
    assert kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), cache_dir=tmp_path) is rebuilt


def test_a_new_kernel_takes_the_plain_path_and_its_repeats_libkjits_own_request(tmp_path):
    # A sweep's new kernel: one kjit_compile_named, no kjit_prepare (which costs a request asked
    # once more); asked again, it is made libkjit's own (its repeats then hash nothing).
    first = kjit.cuda_core.compile(SOURCE, options(), ("scale<7>",), cache_dir=tmp_path)
    key = kjit.cuda_core._request_key(SOURCE, options(), ("scale<7>",), None, tmp_path, {})
    prepared = kjit.cuda_core._requests[key][0]
    assert prepared._handle is None
    assert kjit.cuda_core.compile(SOURCE, options(), ("scale<7>",), cache_dir=tmp_path) is first
    assert prepared._handle is not None
    assert kjit.cuda_core.compile(SOURCE, options(), ("scale<7>",), cache_dir=tmp_path) is first
    # The options are translated once for the kernels that follow, each with its own name.
    eight = kjit.cuda_core.compile(SOURCE, options(), ("scale<8>",), cache_dir=tmp_path)
    assert (key[0], key[4], key[5:]) in kjit.cuda_core._values
    assert eight.symbol_mapping == {"scale<8>": b"_Z5scaleILi8EEvPf"}
    assert first.symbol_mapping == {"scale<7>": b"_Z5scaleILi7EEvPf"}


def test_a_changed_program_options_is_another_request(tmp_path):
    opts = options()
    three = kjit.cuda_core.compile(SOURCE, opts, ("scale<3>",), cache_dir=tmp_path)
    opts.define_macro = ("FACTOR", "5")  # the same object, changed: NVRTC gets the new macro
    five = kjit.cuda_core.compile(SOURCE, opts, ("scale<3>",), cache_dir=tmp_path)
    assert bytes(five.code) != bytes(three.code)
    assert kjit.cache_stats(tmp_path)["entries"] == 2
    # Fields kjit refuses are still refused after the same request succeeded without them.
    opts.define_macro = ("FACTOR", "2")
    kjit.cuda_core.compile(SOURCE, opts, ("scale<3>",), cache_dir=tmp_path, max_cache_size=1 << 40)
    with pytest.raises(ValueError, match="max_cache_size"):
        kjit.cuda_core.compile(SOURCE, opts, ("scale<3>",), cache_dir=tmp_path, max_cache_size=float(1 << 40))
    opts.use_libdevice = True
    with pytest.raises(ValueError, match="use_libdevice.*NVVM"):
        kjit.cuda_core.compile(SOURCE, opts, ("scale<3>",), cache_dir=tmp_path)


def test_a_library_loaded_later_answers_the_repeats(tmp_path):
    kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), cache_dir=tmp_path)
    old = kjit._lib()
    new = kjit.load_library(old.path)
    try:
        kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), cache_dir=tmp_path)
        key = kjit.cuda_core._request_key(SOURCE, options(), ("scale<3>",), None, tmp_path, {})
        assert kjit.cuda_core._requests[key][0].library is new
    finally:
        kjit.load_library(old.path)


@pytest.mark.parametrize("field, value, says", [
    ("relocatable_device_code", True, "relocatable_device_code.*link step"),
    ("extensible_whole_program", True, "extensible_whole_program"),
    ("link_time_optimization", True, "link_time_optimization.*LTO-IR"),
    ("gen_opt_lto", True, "gen_opt_lto.*LTO-IR"),
    ("fdevice_syntax_only", True, "fdevice_syntax_only.*no cubin"),
    ("time", "phases.csv", "time.*writes a file"),
    ("fdevice_time_trace", "trace.json", "fdevice_time_trace.*writes a file"),
    ("create_pch", "x.pch", "create_pch.*pch=True"),
    ("use_pch", "x.pch", "use_pch.*pch=True"),
    ("pch_dir", "pch", "pch_dir.*pch=True"),
    ("use_libdevice", True, "use_libdevice.*NVVM"),
    ("arch", "compute_90", "arch='compute_90'.*real arch"),
])
def test_options_kjit_cannot_honour_are_refused(tmp_path, field, value, says):
    fields = {"arch": ARCH, field: value}
    before = kjit.stats()
    with pytest.raises(ValueError, match=says):
        kjit.cuda_core.compile(SOURCE, ProgramOptions(**fields), ("scale<3>",), cache_dir=tmp_path)
    assert kjit.stats()["compile_misses"] == before["compile_misses"]
    assert kjit.cache_stats(tmp_path)["entries"] == 0


def test_options_kjit_honours(tmp_path):
    # NVRTC's default PCH becomes kjit's own; relocatable_device_code=False is plain whole-program code.
    opts = options(pch=True, relocatable_device_code=False, lineinfo=True)
    assert "--pch" in kjit.cuda_core.kjit_options(opts)["nvrtc_options"]
    code = kjit.cuda_core.compile(SOURCE, opts, ("scale<3>",), cache_dir=tmp_path)
    assert code.symbol_mapping == {"scale<3>": SCALE3}


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match=r"sequence of str or bytes, e.g. \('scale<3>',\)"):
        kjit.cuda_core.compile(SOURCE, options(), "scale<3>", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="one name expression, got 2.*compile_each"):
        kjit.cuda_core.compile(SOURCE, options(), ("scale<1>", "scale<2>"), cache_dir=tmp_path)
    with pytest.raises(ValueError, match="needs keyword="):
        kjit.cuda_core.compile(SOURCE, options(), cache_dir=tmp_path)
    with pytest.raises(ValueError, match="at least one name expression"):
        kjit.cuda_core.compile_each(SOURCE, options(), (), cache_dir=tmp_path)
    with pytest.raises(TypeError, match="must be str or bytes, not int"):
        kjit.cuda_core.compile(SOURCE, options(), (3,), cache_dir=tmp_path)
    with pytest.raises(TypeError, match="arch, nvrtc_options: give these through ProgramOptions"):
        kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), arch=ARCH, nvrtc_options=[], cache_dir=tmp_path)
    with pytest.raises(TypeError, match="must be a cuda.core ProgramOptions, not dict"):
        kjit.cuda_core.compile(SOURCE, {"arch": ARCH}, ("scale<3>",), cache_dir=tmp_path)
    with pytest.raises(kjit.InvalidArgument):  # the lowered name does not pass the keyword rule
        kjit.cuda_core.compile(SOURCE, options(), ("scale<3>",), keyword="plain", cache_dir=tmp_path)
    assert kjit.cache_stats(tmp_path)["entries"] == 0


def test_a_cast_needs_the_keyword(tmp_path):
    source = SOURCE + "__global__ void over(float *p) {}\n__global__ void over(int *p) {}\n"
    cast = "(void (*)(int *))over"
    with pytest.raises(ValueError, match="pass keyword="):
        kjit.cuda_core.compile(source, options(), (cast,), cache_dir=tmp_path)
    code = kjit.cuda_core.compile(source, options(), (cast,), keyword="over", cache_dir=tmp_path)
    assert code.symbol_mapping == {cast: b"_Z4overPi"}


@pytest.mark.parametrize("expression, keyword", [
    ("scale<3>", "scale"), (b"scale<3>", "scale"), ("ops::fill<int>", "ops::fill"), ("&scale<3>", "scale"),
    (" ::ops :: fill< float > ", "ops::fill"), ("plain", "plain"), ("scale<(2 > 1)>", "scale"),
])
def test_keyword_of(expression, keyword):
    assert kjit.cuda_core.keyword_of(expression) == keyword


@pytest.mark.parametrize("expression", ["(void(*)(int))f", "", "3d<1>", "a::"])
def test_keyword_of_refuses(expression):
    with pytest.raises(ValueError, match="pass keyword="):
        kjit.cuda_core.keyword_of(expression)


@needs_double
def test_as_cuda_core_gives_a_cuda_core_kernel_that_keeps_kjits_alive(tmp_path, driver, fake):
    # kjit's Kernel -> cuda.core's Kernel, with the options translated the other way.
    k = kjit.compile_and_load(SOURCE, "scale", cache_dir=tmp_path, name_expression="scale<3>",
                              **kjit.cuda_core.kjit_options(options()))
    core = k.as_cuda_core()
    assert isinstance(core, cuda.core.Kernel)
    assert int(core.handle) == k.cukernel
    assert fake.fake_cuda_kernel_name(int(core.handle)) == SCALE3
    alive = weakref.ref(k)
    del k
    gc.collect()
    assert alive() is not None and not alive().released
    del core
    gc.collect()
    assert alive() is None


@needs_double
def test_as_cuda_core_without_a_driver_cuda_core_can_load_says_what_it_needs(tmp_path):
    # cuda.core calls the driver through "libcuda.so.1", by that name. kjit's driver here is a
    # copy of the double whose SONAME is changed, in a fresh process: kjit loads a kernel through
    # it, and no library named libcuda.so.1 is loaded or on the search path (this machine has no
    # GPU; on a GPU the driver is found and the test skips). Without kjit's check, cuda.core ends
    # in a SystemError at its first driver call, saying nothing of the driver.
    data = pathlib.Path(LIBCUDA).read_bytes()
    assert data.count(b"libcuda.so.1\0") == 1, "the double's SONAME"
    renamed = tmp_path / "libkjit-test-driver.so"
    renamed.write_bytes(data.replace(b"libcuda.so.1\0", b"libcudX.so.1\0"))
    child = textwrap.dedent("""\
        import ctypes, sys
        try:
            ctypes.CDLL("libcuda.so.1")
            sys.exit(3)  # a driver cuda.core can load: nothing to check here
        except OSError:
            pass
        sys.path.insert(0, sys.argv[2])
        import kjit
        k = kjit.compile_and_load(sys.stdin.read(), "scale", name_expression="scale<3>", arch="sm_90",
                                  nvrtc_options=["-DFACTOR=2"], cache_dir=sys.argv[1])
        try:
            k.as_cuda_core()
        except kjit.DriverError as e:
            print(repr(e.status), e.function)
            print(e.message)
            sys.exit(0)
        sys.exit(4)
        """)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", KJIT_LIBCUDA=str(renamed))
    run = subprocess.run([sys.executable, "-c", child, str(tmp_path), str(PYTHON_DIR)], input=SOURCE,
                         capture_output=True, text=True, env=env, timeout=120)
    if run.returncode == 3:
        pytest.skip("a libcuda.so.1 can be loaded here: cuda.core finds a driver")
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr)
    status, message = run.stdout.split("\n", 1)
    assert status == "<Status.ERROR_DRIVER_UNAVAILABLE: 8> Kernel.as_cuda_core"
    assert message.startswith("no usable CUDA driver for cuda.core: libcuda.so.1: cannot open shared object file")
    for says in ("cuda.core loads the NVIDIA driver's libcuda.so.1 by that name", str(renamed),
                 "install the driver", "LD_LIBRARY_PATH", "compiling, naming and the cache work without one"):
        assert says in message, says


# ---- on a GPU only (KJIT_TEST_GPU=1) ----

GPU_SOURCE = textwrap.dedent("""\
    template <int N> __global__ void ramp(int *p, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) p[i] = N * i;
    }
    """)


def _launch_and_read(kernel, n):
    import numpy as np
    from cuda.bindings import driver as cu
    from cuda.core import Device, LaunchConfig, launch
    dev = Device()
    dev.set_current()
    stream = dev.create_stream()
    buf = dev.allocate(n * 4, stream=stream)
    launch(stream, LaunchConfig(grid=(n + 255) // 256, block=256), kernel, buf, np.int32(n))
    stream.sync()
    host = np.zeros(n, dtype=np.int32)
    (result,) = cu.cuMemcpyDtoH(host.ctypes.data, int(buf.handle), n * 4)
    assert result == cu.CUresult.CUDA_SUCCESS, result
    buf.close(stream)
    return host


@needs_gpu
def test_gpu_launch_from_a_cached_object_code(tmp_path, driver):
    import numpy as np
    from cuda.core import Device
    Device().set_current()
    opts = ProgramOptions()  # cuda.core's default: the current device's arch
    kjit.cuda_core.compile(GPU_SOURCE, opts, ("ramp<3>",), cache_dir=tmp_path)
    code = kjit.cuda_core.compile(GPU_SOURCE, opts, ("ramp<3>",), cache_dir=tmp_path)  # a hit
    n = 1000
    assert (_launch_and_read(code.get_kernel("ramp<3>"), n) == 3 * np.arange(n, dtype=np.int32)).all()


@needs_gpu
def test_gpu_launch_through_as_cuda_core(tmp_path, driver):
    import numpy as np
    from cuda.core import Device
    Device().set_current()
    with kjit.compile_and_load(GPU_SOURCE, "ramp", cache_dir=tmp_path, name_expression="ramp<5>",
                               **kjit.cuda_core.kjit_options(ProgramOptions())) as k:
        n = 700
        assert (_launch_and_read(k.as_cuda_core(), n) == 5 * np.arange(n, dtype=np.int32)).all()
