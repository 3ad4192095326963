"""Tests of python/kjit/ against the built libkjit.so.

Environment: KJIT_LIBRARY (the library; else kjit's own search), KJIT_LIBCUDA (the CUDA driver
test double, build/tests/fake_driver/libcuda.so.1; the load tests are skipped without it).
cubins are made here with kjit.compile(arch="sm_90") into a temporary cache: NVRTC needs no GPU.
"""

import ctypes
import dataclasses
import datetime
import gc
import io
import json
import multiprocessing
import os
import pathlib
import pickle
import struct
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent
# KJIT_TEST_INSTALLED=1 (tests/wheel_test.sh): the package pip installed, not python/kjit/.
INSTALLED = os.environ.get("KJIT_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, str(PYTHON_DIR))

import kjit  # noqa: E402
from driver_double import open_driver_double  # noqa: E402

LIBCUDA = os.environ.get("KJIT_LIBCUDA")
needs_driver = pytest.mark.skipif(not LIBCUDA, reason="KJIT_LIBCUDA is unset (no driver test double)")

# Exercises every kjit_compile_options field: an in-memory header, an include path, an NVRTC
# option, a name expression, the arch and the cache folder. Keyword rule for "scale": the three
# kernels match, the exact identifier leaves the template; "scale_" is ambiguous.
SOURCE = textwrap.dedent("""\
    #include "factor.h"
    #include "other.h"
    #ifndef KJIT_TEST_OPTION
    #error "the NVRTC options did not arrive"
    #endif
    template <int N> __global__ void scale(float *p) { p[threadIdx.x] *= N * FACTOR * OTHER; }
    __global__ void scale_a(float *p) { p[0] = 1.0f; }
    __global__ void scale_b(float *p) { p[0] = 2.0f; }
    """)
SCALE4 = "_Z5scaleILi4EEvPf"


class Built:
    pass


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One compile shared by the module."""
    b = Built()
    b.cache = tmp_path_factory.mktemp("cache")
    b.include = tmp_path_factory.mktemp("include")
    (b.include / "other.h").write_text("#define OTHER 1\n")
    b.kwargs = dict(cache_dir=b.cache, arch="sm_90", nvrtc_options=["-std=c++17", "-DKJIT_TEST_OPTION=1"],
                    include_paths=[b.include], headers={"factor.h": "#define FACTOR 2\n"},
                    name_expression="scale<4>")
    b.path = kjit.compile(SOURCE, "scale", **b.kwargs)
    b.name = kjit.resolve_name(b.path, "scale")
    return b


def test_version():
    major, minor, patch = kjit.version()
    assert all(isinstance(v, int) for v in (major, minor, patch))
    assert (major, minor, patch) >= (0, 1, 0)
    assert kjit.version_string() == f"{major}.{minor}.{patch}"


def test_status_string():
    assert kjit.status_string(0) == "ok"
    assert kjit.status_string(kjit.Status.ERROR_NOT_FOUND) == "not found"
    assert kjit.status_string(9999) == "unknown status"
    with pytest.raises(TypeError):
        kjit.status_string("2")
    with pytest.raises(ValueError):
        kjit.status_string(2**40)


def test_compile_returns_cubin_in_cache(built):
    path = pathlib.Path(built.path)
    assert path.is_absolute() and path.is_file() and path.name == "kernel.cubin"
    assert built.cache.resolve() in path.resolve().parents
    head = path.read_bytes()[:64]
    assert head[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", head, 18)[0] == 190  # EM_CUDA
    flags = struct.unpack_from("<I", head, 48)[0]
    sm = (flags >> 8) & 0xFF if head[8] >= 8 else flags & 0xFF
    assert sm == 90


def test_resolve_name_of_templated_kernel(built):
    assert built.name.startswith("_Z") and "scale" in built.name
    assert built.name == SCALE4
    assert kjit.resolve_name(built.path, "scale") == built.name  # a second call agrees
    sidecar = pathlib.Path(built.path + ".name").read_text().splitlines()
    assert any(line.split()[:1] == ["scale"] and built.name in line.split() for line in sidecar)
    assert kjit.resolve_name(built.path, "scale_a") == "_Z7scale_aPf"


def test_compile_hit_returns_same_path(built):
    assert kjit.compile(SOURCE, "scale", **built.kwargs) == built.path
    other = dict(built.kwargs, nvrtc_options=["-std=c++17", "-DKJIT_TEST_OPTION=2"])
    path2 = kjit.compile(SOURCE, "scale", **other)
    assert path2 != built.path and os.path.isfile(path2)


def test_messages_name_keyword_arguments_not_c_fields(tmp_path):
    # libkjit's text says "pass the arch in kjit_compile_options.arch"; Python code passes arch=.
    with pytest.raises(kjit.InvalidArgument) as info:
        kjit.compile("__global__ void gemm(float *p) {}", "gemm", cache_dir=tmp_path, arch="sm_90",
                     nvrtc_options=["-arch=sm_80"])
    assert "pass the arch in arch=, not as an NVRTC option" in str(info.value) and "kjit_compile_options" not in str(info.value), str(info.value)


def test_compile_error_carries_nvrtc_log(tmp_path):
    src = "__global__ void broken(float *p) { p[0] = undeclared_thing_xyz; }\n"
    with pytest.raises(kjit.CompileError) as info:
        kjit.compile(src, "broken", cache_dir=tmp_path, arch="sm_90")
    e = info.value
    assert e.status == kjit.Status.ERROR_COMPILE and e.status == 6
    assert e.status_name == kjit.status_string(6) == "compile error"
    assert "undeclared_thing_xyz" in e.message and "undeclared_thing_xyz" in str(e)
    assert "KJIT_ERROR_COMPILE" in str(e) and e.function == "kjit_compile"
    assert kjit.last_error() == e.message  # the same thread's detail, unchanged since
    assert not list(tmp_path.rglob("*.cubin"))  # a failed compile publishes nothing


def test_unwritable_trace_file_is_an_error_not_an_abort(tmp_path):
    # NVRTC 13 aborts the process when it cannot create -fdevice-time-trace's file; libkjit checks
    # it first (issue 45). Run in a child: an abort there fails this test instead of killing pytest.
    path = "" if INSTALLED else f"sys.path.insert(0, {str(PYTHON_DIR)!r})"
    code = textwrap.dedent(f"""
        import os, sys
        {path}
        import kjit
        src = "__global__ void traced(float *p) {{ p[0] = 1; }}"
        os.chdir({str(tmp_path)!r})
        for options, program, named in ((["-fdevice-time-trace={tmp_path}/missing/t"], None, "missing/t.json"),
                                        (["-fdevice-time-trace=-"], "gen/k.cu", "gen/k.cu.json")):
            try:
                kjit.compile(src, "traced", cache_dir="cache", arch="sm_90", nvrtc_options=options,
                             filename=program)
            except kjit.KjitIOError as e:
                assert named in e.message, e.message
                assert e.status == kjit.Status.ERROR_IO
            else:
                sys.exit("no error for " + repr(options))
        print("alive")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert run.returncode == 0 and run.stdout.strip() == "alive", (run.returncode, run.stdout, run.stderr)


def test_compile_mode_never_raises_not_cached_and_warn_compiles(tmp_path, monkeypatch):
    # A serving process refuses to compile (libkjit 0.11): compile_mode="never" or
    # $KJIT_NO_COMPILE=1 makes a miss NotCachedError, naming the request; a hit is a hit.
    src = "template <int N> __global__ void served(float *p) { p[0] = N; }"
    hit = kjit.compile(src, "served", cache_dir=tmp_path, arch="sm_90", name_expression="served<1>")
    before = kjit.stats()
    assert kjit.compile(src, "served", cache_dir=tmp_path, arch="sm_90", name_expression="served<1>",
                        compile_mode="never") == hit
    with pytest.raises(kjit.NotCachedError) as info:
        kjit.compile_named(src, "served", cache_dir=tmp_path, arch="sm_90", name_expression="served<2>",
                           compile_mode="never")
    e = info.value
    assert e.status == kjit.Status.ERROR_NOT_CACHED == 15 and isinstance(e, kjit.KjitError)
    assert "served<2>" in e.message and "sm_90" in e.message and "docs/serving.md" in e.message, e.message
    assert "compile_mode=" in e.message or "compile_mode option" in e.message, e.message
    monkeypatch.setenv("KJIT_NO_COMPILE", "1")
    with pytest.raises(kjit.NotCachedError) as info:
        kjit.compile(src, "served", cache_dir=tmp_path, arch="sm_90", name_expression="served<3>")
    assert "$KJIT_NO_COMPILE=1" in info.value.message
    assert kjit.stats().nvrtc_compiles == before.nvrtc_compiles
    # The keyword wins over the variable; warn compiles.
    kjit.compile(src, "served", cache_dir=tmp_path, arch="sm_90", name_expression="served<4>", compile_mode="warn")
    assert kjit.stats().nvrtc_compiles == before.nvrtc_compiles + 1
    with pytest.raises(ValueError, match="compile_mode must be one of"):
        kjit.compile(src, "served", cache_dir=tmp_path, arch="sm_90", compile_mode="sometimes")


def test_base_dirs_are_taken_by_every_compile_call_and_checked(tmp_path, monkeypatch):
    # Base folders (libkjit 0.12, issue 47): base_dirs= on every compile entry point, passed in
    # kjit_compile_options (the struct reaches 0.12 only with them); [] is "none". Folders that
    # hold nothing the kernel reads: the same entry (the key holds no base folder itself).
    monkeypatch.delenv("KJIT_BASE_DIRS", raising=False)
    based = kjit._convert.compile_options([], arch="sm_90", base_dirs=["/opt/a", pathlib.Path("/opt/b")])
    assert based.struct_size == ctypes.sizeof(kjit._abi.CompileOptions)
    assert based.base_dir_count == 2 and based.base_dirs[0] == b"/opt/a" and based.base_dirs[1] == b"/opt/b"
    none = kjit._convert.compile_options([], arch="sm_90", base_dirs=())
    assert none.base_dir_count == 1 and none.base_dirs[0] == b"none"
    moded = kjit._convert.compile_options([], arch="sm_90", compile_mode="never")
    assert moded.struct_size == kjit._abi.CompileOptions.base_dirs.offset and moded.base_dir_count == 0
    base, cache = tmp_path / "base", tmp_path / "cache"
    base.mkdir()
    path = kjit.compile(SIMPLE, "scale", cache_dir=cache, arch="sm_90")
    assert kjit.compile(SIMPLE, "scale", cache_dir=cache, arch="sm_90", base_dirs=[base]) == path
    assert kjit.compile(SIMPLE, "scale", cache_dir=cache, arch="sm_90", base_dirs=[]) == path
    assert kjit.compile_named(SIMPLE, "scale", cache_dir=cache, arch="sm_90", base_dirs=[str(base)]).cubin_path == path
    assert kjit.prepare(SIMPLE, "scale", cache_dir=cache, arch="sm_90", base_dirs=(base,)).compile() == path
    items = kjit.compile_batch([(SIMPLE, "scale")], cache_dir=cache, arch="sm_90", base_dirs=[base])
    assert [i.cubin_path for i in items] == [path], items
    items = kjit.compile_batch([dict(source=SIMPLE, keyword="scale", base_dirs=[base])], cache_dir=cache, arch="sm_90")
    assert [i.cubin_path for i in items] == [path], items
    monkeypatch.setenv("KJIT_BASE_DIRS", f"{base}::{base}")
    assert kjit.compile(SIMPLE, "scale", cache_dir=cache, arch="sm_90") == path
    # Not a list of folders: refused here; an empty name: by libkjit, naming the field.
    for wrong in (str(base), base, 5):
        with pytest.raises(TypeError, match="base_dirs"):
            kjit.compile(SIMPLE, "scale", cache_dir=cache, arch="sm_90", base_dirs=wrong)
    with pytest.raises(TypeError, match="base_dirs"):
        kjit.compile(SIMPLE, "scale", cache_dir=cache, arch="sm_90", base_dirs=[base, None])
    with pytest.raises(kjit.InvalidArgument, match="base_dirs has an empty folder name"):
        kjit.compile(SIMPLE, "scale", cache_dir=cache, arch="sm_90", base_dirs=[base, ""])


def test_record_then_warm_then_serve_strict(tmp_path):
    # Issue 48: a staging run recorded, a cache warmed from the record for two arches, a strict run.
    src = "template <int N> __global__ void served(float *p) { p[0] = N; }"
    record = tmp_path / "requests.jsonl"
    with kjit.record(record):
        for n in (1, 2, 1):
            kjit.compile(src, "served", cache_dir=tmp_path / "staging", arch="sm_90", name_expression=f"served<{n}>",
                         headers={"cfg.h": "#define X 1\n"}, nvrtc_options=["-DY=2"])
    kjit.compile(src, "served", cache_dir=tmp_path / "staging", arch="sm_90", name_expression="served<9>")
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["name_expression"] for line in lines] == ["served<1>", "served<2>"], lines
    assert lines[0]["headers"] == [["cfg.h", "#define X 1\n"]] and lines[0]["nvrtc_options"] == ["-DY=2"]
    items = kjit.warm([record, record], arch=["sm_90", "sm_80"], cache_dir=tmp_path / "served")
    assert [i.status for i in items] == [kjit.Status.OK] * 4, [i.error for i in items]
    before = kjit.stats()
    for arch in ("sm_90", "sm_80"):
        kjit.compile(src, "served", cache_dir=tmp_path / "served", arch=arch, name_expression="served<2>",
                     headers={"cfg.h": "#define X 1\n"}, nvrtc_options=["-DY=2"], compile_mode="never")
    assert kjit.stats().nvrtc_compiles == before.nvrtc_compiles
    (tmp_path / "empty.jsonl").write_text("not a request\n")
    with pytest.raises(ValueError, match="no request"):
        kjit.warm([tmp_path / "empty.jsonl"])


def test_a_record_made_under_one_prefix_warms_a_cache_under_another(tmp_path):
    # Issues 47 and 48: with base folders, a record names paths under them ("{base 0}/inc"); a
    # node installed elsewhere warms from it with its own base folder and serves strictly.
    src = ('#include "tile.h"\ntemplate <int V> __global__ void gemm(const char **p) { p[0] = __FILE__; }\n'
           "template __global__ void gemm<CFG>(const char **);\n")
    for prefix in ("A", "B"):
        (tmp_path / prefix / "inc").mkdir(parents=True)
        (tmp_path / prefix / "inc" / "tile.h").write_text("#define CFG 31\n")
    record = tmp_path / "requests.jsonl"
    with kjit.record(record):
        kjit.compile(src, "gemm", cache_dir=tmp_path / "staging", arch="sm_90",
                     nvrtc_options=["-I", str(tmp_path / "A" / "inc")], base_dirs=[tmp_path / "A"])
    line = json.loads(record.read_text().splitlines()[0])
    assert line["nvrtc_options"] == ["-I", "{base 0}/inc"] and line["base_dirs"] == 1, line
    with pytest.raises(ValueError, match="1 base folder"):
        kjit.warm([record], cache_dir=tmp_path / "served", base_dirs=[])
    items = kjit.warm([record], cache_dir=tmp_path / "served", base_dirs=[tmp_path / "B"])
    assert [i.status for i in items] == [kjit.Status.OK], [i.error for i in items]
    before = kjit.stats()
    kjit.compile(src, "gemm", cache_dir=tmp_path / "served", arch="sm_90", compile_mode="never",
                 nvrtc_options=["-I", str(tmp_path / "B" / "inc")], base_dirs=[tmp_path / "B"])
    assert kjit.stats().nvrtc_compiles == before.nvrtc_compiles


def test_compile_invalid_arguments_from_c(tmp_path):
    src = "__global__ void k(float *p) {}\n"
    with pytest.raises(kjit.InvalidArgument) as info:
        kjit.compile(src, "k", cache_dir=tmp_path, arch="compute_90")
    assert info.value.status == kjit.Status.ERROR_INVALID_ARGUMENT
    assert isinstance(info.value, ValueError)
    with pytest.raises(kjit.InvalidArgument):
        kjit.compile(src, "k", cache_dir=tmp_path, arch="sm_90", nvrtc_options=["-arch=sm_80"])
    with pytest.raises(kjit.InvalidArgument):
        kjit.compile(src, "not a keyword!", cache_dir=tmp_path, arch="sm_90")
    with pytest.raises(kjit.CompileError) as info:
        kjit.compile(src, "k", cache_dir=tmp_path, arch="sm_90", nvrtc_options=["--no-such-nvrtc-option"])
    assert info.value.status == kjit.Status.ERROR_NVRTC


@pytest.mark.parametrize("call", [
    lambda p: kjit.resolve_name(None, "scale"),
    lambda p: kjit.resolve_name(p, None),
    lambda p: kjit.resolve_name(123, "scale"),
    lambda p: kjit.resolve_name(p, b"scale"),
    lambda p: kjit.load_cached(None, "scale"),
    lambda p: kjit.compile(None, "k"),
    lambda p: kjit.compile("x", None),
    lambda p: kjit.compile("x", "k", nvrtc_options="-std=c++17"),
    lambda p: kjit.compile("x", "k", include_paths=None),
    lambda p: kjit.compile("x", "k", headers=["factor.h"]),
    lambda p: kjit.compile("x", "k", arch=90),
])
def test_python_type_errors_before_c(built, call):
    with pytest.raises(TypeError) as info:
        call(built.path)
    assert not isinstance(info.value, kjit.KjitError)


def test_nul_characters_rejected_before_c(built):
    for call in (lambda: kjit.resolve_name(built.path + "\0x", "scale"),
                 lambda: kjit.resolve_name(built.path, "sca\0le"),
                 lambda: kjit.compile("x\0", "k")):
        with pytest.raises(ValueError) as info:
            call()
        assert not isinstance(info.value, kjit.KjitError)


def test_resolve_missing_file(tmp_path):
    missing = tmp_path / "missing.cubin"
    with pytest.raises(kjit.KjitIOError) as info:
        kjit.resolve_name(missing, "scale")
    e = info.value
    assert e.status == kjit.Status.ERROR_IO and e.status_name == "I/O error"
    assert str(missing) in e.message and str(missing) in str(e)
    with pytest.raises(kjit.KjitIOError):
        kjit.resolve_name(tmp_path, "scale")  # a directory


def test_resolve_non_elf_file(tmp_path):
    junk = tmp_path / "junk.cubin"
    junk.write_bytes(b"this is not an ELF file\n" * 8)
    with pytest.raises(kjit.BadCubin) as info:
        kjit.resolve_name(junk, "scale")
    assert info.value.status == kjit.Status.ERROR_BAD_CUBIN
    assert str(junk) in info.value.message


def test_resolve_ambiguous_and_not_found(built):
    with pytest.raises(kjit.Ambiguous) as info:
        kjit.resolve_name(built.path, "scale_")
    e = info.value
    assert e.status == kjit.Status.ERROR_AMBIGUOUS == 3
    assert "_Z7scale_aPf" in e.message and "_Z7scale_bPf" in e.message
    with pytest.raises(kjit.NotFound) as info:
        kjit.resolve_name(built.path, "no_such_kernel")
    assert info.value.status == kjit.Status.ERROR_NOT_FOUND
    with pytest.raises(kjit.InvalidArgument):
        kjit.resolve_name(built.path, "")


def test_bytes_and_pathlike_paths(built):
    class BytesPath:
        def __fspath__(self):
            return os.fsencode(built.path)

    for p in (built.path, os.fsencode(built.path), pathlib.Path(built.path), BytesPath()):
        assert kjit.resolve_name(p, "scale") == built.name


def test_buffers_grow_to_reported_length(built, monkeypatch):
    lib = kjit._lib()
    raw = lib._fn["kjit_resolve_name"]
    small, length = ctypes.create_string_buffer(4), ctypes.c_size_t()
    status = raw(built.path.encode(), b"scale", small, 4, ctypes.byref(length))
    assert status == kjit.Status.ERROR_BUFFER_TOO_SMALL and length.value == len(built.name)
    monkeypatch.setattr(kjit.Library, "name_buffer_size", 4)
    monkeypatch.setattr(kjit.Library, "path_buffer_size", 8)
    assert kjit.resolve_name(built.path, "scale") == built.name
    assert kjit.compile(SOURCE, "scale", **built.kwargs) == built.path


def test_many_threads_resolve_concurrently(built, tmp_path):
    results, errors = [], []
    lock = threading.Lock()

    def work(i):
        missing = str(tmp_path / f"missing-{i}.cubin")
        try:
            for _ in range(200):
                if i % 4 == 3:  # some threads fail: each must see its own error text
                    try:
                        kjit.resolve_name(missing, "scale")
                        raise AssertionError("resolve of a missing file succeeded")
                    except kjit.KjitIOError as e:
                        assert missing in e.message, e.message
                else:
                    name = kjit.resolve_name(built.path, "scale")
                    with lock:
                        results.append(name)
        except BaseException as e:  # noqa: BLE001 (reported below)
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(results) == 6 * 200 and set(results) == {built.name}


# ---------------------------------------------------------------------------------------------
# Finding the library

def test_bad_explicit_path_lists_it():
    bad = "/nonexistent/kjit-test/libkjit.so"
    with pytest.raises(kjit.LibraryNotFound) as info:
        kjit.Library(bad)
    e = info.value
    assert isinstance(e, kjit.KjitError) and e.status is None
    assert bad in str(e) and [place for place, _ in e.tried] == [f"explicit path {bad!r}"]


def test_explicit_path_beats_environment(monkeypatch):
    good = kjit._lib().path
    monkeypatch.setenv("KJIT_LIBRARY", "/nonexistent/libkjit.so")
    assert kjit.Library(good).version() == kjit.version()
    with pytest.raises(kjit.LibraryNotFound, match="/nonexistent/libkjit.so"):
        kjit.Library()


def test_find_library_result_is_used(monkeypatch):
    good = kjit._lib().path
    monkeypatch.delenv("KJIT_LIBRARY", raising=False)
    import ctypes.util  # kjit imports it only when it searches
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: good if name == "kjit" else None)
    assert kjit.Library().path == good


def _child_env():
    """This environment, for a child Python that imports the same kjit as this process:
    python/kjit/, or the installed package."""
    path = [] if INSTALLED else [str(PYTHON_DIR)]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path + [os.environ.get("PYTHONPATH")])))


def _run_python(code, **env_changes):
    env = _child_env()
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_import_is_lazy_and_env_path_is_reported():
    bad = "/nonexistent/env/libkjit.so"
    r = _run_python("""
        import kjit
        print("imported")
        try:
            kjit.version()
        except kjit.LibraryNotFound as e:
            print("NOTFOUND", e)
        """, KJIT_LIBRARY=bad)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("imported") and "NOTFOUND" in r.stdout and bad in r.stdout


def test_search_failure_names_every_place():
    r = _run_python("""
        import ctypes.util, kjit
        ctypes.util.find_library = lambda name: None
        try:
            kjit.Library()
            print("LOADED")
        except kjit.LibraryNotFound as e:
            print(e)
        """, KJIT_LIBRARY=None, LD_LIBRARY_PATH=None)
    assert r.returncode == 0, r.stderr
    if INSTALLED:
        assert "LOADED" in r.stdout, r.stdout  # the package's own, beside the module
        return
    if "LOADED" in r.stdout:
        pytest.skip("a libkjit is installed on the default search path")
    for place in ("$KJIT_LIBRARY", "beside this module", "find_library('kjit')", "'libkjit.so.0'", "'libkjit.so'"):
        assert place in r.stdout, r.stdout


@pytest.mark.skipif(not INSTALLED, reason="runs against the installed wheel only (tests/wheel_test.sh)")
def test_the_installed_package_loads_the_library_beside_it():
    # Nothing set: no KJIT_LIBRARY, no LD_LIBRARY_PATH; the library and its worker come from
    # the package folder, and a compile and a batch on worker processes work.
    package = pathlib.Path(kjit.__file__).resolve().parent
    assert PYTHON_DIR not in package.parents and package != PYTHON_DIR, package
    assert "KJIT_LIBRARY" not in os.environ and "LD_LIBRARY_PATH" not in os.environ
    lib = kjit.Library()
    assert pathlib.Path(lib.path).resolve() == package / "libkjit.so.0", lib.path


@pytest.mark.skipif(not INSTALLED, reason="runs against the installed wheel only (tests/wheel_test.sh)")
def test_the_installed_package_uses_the_nvrtc_wheel(tmp_path):
    # tests/wheel_test.sh put an nvidia-cuda-nvrtc wheel's layout into the venv, and left
    # KJIT_LIBNVRTC unset: a fresh process compiles with that NVRTC, and says so in its maps.
    r = _run_python("""
        import os, sys, kjit
        kjit.compile_named("__global__ void gemm(float *p) { p[0] = 1; }", "gemm", cache_dir=sys.argv[1],
                           arch="sm_90")
        print(os.environ.get("KJIT_LIBNVRTC"))
        print(open("/proc/self/maps").read())
        """.replace("sys.argv[1]", repr(str(tmp_path))), KJIT_LIBNVRTC=None)
    assert r.returncode == 0, r.stderr
    chosen = r.stdout.splitlines()[0]
    assert "/nvidia/cu" in chosen and chosen.endswith(".so." + chosen.rsplit(".", 1)[1]), r.stdout[:300]
    mapped = {line.split()[-1] for line in r.stdout.splitlines()[1:] if "/libnvrtc." in line}
    assert mapped == {chosen}, mapped


@pytest.mark.skipif(not INSTALLED, reason="runs against the installed wheel only (tests/wheel_test.sh)")
def test_the_installed_package_compiles_on_its_worker_processes(tmp_path):
    items = kjit.compile_batch([(_numbered(i), "gemm") for i in range(2)], worker_kind=kjit.WORKERS_PROCESSES,
                               cache_dir=tmp_path, arch="sm_90")
    assert [item.kernel_name for item in items] == ["_Z4gemmILi1EEvPf", "_Z4gemmILi2EEvPf"], items


# ---------------------------------------------------------------------------------------------
# Loading through the driver test double

class _Counters(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in (
        "library_loads", "library_unloads", "live_libraries", "rejected_images",
        "get_kernel_calls", "kernels_not_found", "bad_handles", "init_calls")]


@pytest.fixture(scope="module")
def fake():
    lib = open_driver_double("fake_cuda_get_counters")
    lib.fake_cuda_kernel_name.restype = ctypes.c_char_p
    lib.fake_cuda_kernel_name.argtypes = [ctypes.c_void_p]
    lib.fake_cuda_function_name.restype = ctypes.c_char_p
    lib.fake_cuda_function_name.argtypes = [ctypes.c_void_p]
    lib.fake_cuda_get_counters.argtypes = [ctypes.POINTER(_Counters)]
    lib.fake_cuda_get_counters.restype = None

    def counters():
        c = _Counters()
        lib.fake_cuda_get_counters(ctypes.byref(c))
        return c

    lib.counters = counters
    return lib


@needs_driver
def test_load_cached_kernel(built, fake):
    with kjit.load_cached(built.path, "scale") as k:
        assert isinstance(k, kjit.Kernel)
        assert k.name == built.name == kjit.resolve_name(built.path, "scale")
        assert k.cubin_path == built.path
        assert k.cukernel != 0 and k.culibrary != 0
        assert fake.fake_cuda_kernel_name(k.cukernel).decode() == built.name
        assert built.name in repr(k) and not k.released
    assert k.released
    k.release()  # idempotent
    k.close()
    assert k.name == built.name  # still readable
    with pytest.raises(ValueError):
        k.cukernel
    with pytest.raises(ValueError):
        k.cufunction()
    assert fake.counters().bad_handles == 0


def _gemm(n):
    return (f"template <int N> __global__ void gemm(float *p) {{ p[threadIdx.x] = N; }}\n"
            f"template __global__ void gemm<{n}>(float *);\n")


def _in_forked_worker(path, cache, n):
    """Runs in a multiprocessing worker forked while the parent's thread compiles gemm<n>."""
    compiled = kjit.compile(_gemm(n), "gemm", cache_dir=cache, arch="sm_90")
    with kjit.load_cached(path, "scale") as k:
        return compiled, kjit.resolve_name(compiled, "gemm"), k.name, k.culibrary


@needs_driver
def test_multiprocessing_fork_child_compiles_and_loads_afresh(built, fake, tmp_path):
    """multiprocessing forks by default on Linux: a worker forked while a thread of the parent
    compiles, and after the parent loaded a kernel, compiles the same kernel and loads its own."""
    parent = kjit.load_cached(built.path, "scale")
    before = fake.counters()
    n = 300 + os.getpid() % 1000
    compiling = threading.Thread(target=kjit.compile, args=(_gemm(n), "gemm"),
                                 kwargs=dict(cache_dir=tmp_path, arch="sm_90"))
    compiling.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork()"
            with multiprocessing.get_context("fork").Pool(2) as pool:
                results = [pool.apply_async(_in_forked_worker, (built.path, str(tmp_path), n)) for _ in range(2)]
                answers = [r.get(timeout=120) for r in results]
    finally:
        compiling.join()
    for compiled, name, loaded_name, culibrary in answers:
        assert name == f"_Z4gemmILi{n}EEvPf"
        assert loaded_name == built.name
        assert culibrary not in (0, parent.culibrary)
    assert parent.culibrary != 0 and fake.fake_cuda_kernel_name(parent.cukernel).decode() == built.name
    parent.release()
    assert fake.counters().bad_handles == before.bad_handles


@needs_driver
def test_release_unloads_with_last_handle(built, fake):
    before = fake.counters()
    k1 = kjit.load_cached(pathlib.Path(built.path), "scale")
    k2 = kjit.load_cached(os.fsencode(built.path), "scale_a")
    assert k1.culibrary == k2.culibrary and k1.cukernel != k2.cukernel
    assert fake.fake_cuda_kernel_name(k2.cukernel) == b"_Z7scale_aPf"
    assert fake.counters().live_libraries == before.live_libraries + 1
    k1.release()
    assert fake.counters().library_unloads == before.library_unloads
    k2.release()
    k2.release()
    after = fake.counters()
    assert after.library_unloads == before.library_unloads + 1
    assert after.live_libraries == before.live_libraries and after.bad_handles == 0


@needs_driver
def test_del_releases_handle(built, fake):
    before = fake.counters()
    k = kjit.load_cached(built.path, "scale")
    assert fake.counters().live_libraries == before.live_libraries + 1
    del k
    gc.collect()
    assert fake.counters().live_libraries == before.live_libraries


@needs_driver
def test_cufunction_needs_a_context(built, fake):
    with kjit.load_cached(built.path, "scale") as k:
        with pytest.raises(kjit.DriverError) as info:
            k.cufunction()
        assert info.value.status == kjit.Status.ERROR_DRIVER
        assert "context" in info.value.message
        assert fake.cuInit(0) == 0
        ctx = ctypes.c_void_p()
        assert fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert fake.cuCtxSetCurrent(ctx) == 0
        try:
            fn = k.cufunction()
            assert fn != 0 and fake.fake_cuda_function_name(fn).decode() == built.name
        finally:
            fake.cuCtxSetCurrent(None)


class _Launch(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_char_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_mem", ctypes.c_uint), ("stream", ctypes.c_void_p), ("first_param", ctypes.c_ulonglong),
                ("launches", ctypes.c_ulonglong)]


@needs_driver
def test_launch_through_the_driver(built, fake):
    # What kjit hands cuLaunchKernel, as the driver test double records it: the kernel, the
    # dimensions, the stream, and each argument's address in kernelParams, from the kinds of
    # arguments and streams users have (ctypes, a PyTorch-like tensor, a CUDA array interface,
    # a cuda.core-like stream).
    fake.fake_cuda_last_launch.argtypes = [ctypes.POINTER(_Launch)]
    fake.fake_cuda_last_launch.restype = ctypes.c_int

    class Tensor:  # PyTorch's shape of it
        def data_ptr(self):
            return 0x7000_1000

    class Array:  # CuPy's, Numba's
        __cuda_array_interface__ = {"data": (0x7000_2000, False), "shape": (4,), "typestr": "<f4", "version": 3}

    class Stream:  # cuda.core's protocol
        def __cuda_stream__(self):
            return (0, 0x5000)

    last = _Launch()
    with kjit.load_cached(built.path, "scale") as k:
        with pytest.raises(kjit.DriverError, match="CUDA_ERROR_INVALID_CONTEXT"):
            k.launch(1, 32, [ctypes.c_void_p(0x1000)])
        assert fake.cuInit(0) == 0
        ctx = ctypes.c_void_p()
        assert fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert fake.cuCtxSetCurrent(ctx) == 0
        try:
            k.launch((4, 2), (128,), [ctypes.c_void_p(0x1234_5678)], shared_mem=256, stream=0x4000)
            assert fake.fake_cuda_last_launch(ctypes.byref(last)) == 1
            assert last.kernel.decode() == built.name == k.name
            assert list(last.grid) == [4, 2, 1] and list(last.block) == [128, 1, 1]
            assert last.shared_mem == 256 and last.stream == 0x4000 and last.first_param == 0x1234_5678
            for arg, pointer in ((Tensor(), 0x7000_1000), (Array(), 0x7000_2000)):
                k.launch(1, 32, [arg], stream=Stream())
                fake.fake_cuda_last_launch(ctypes.byref(last))
                assert last.first_param == pointer and last.stream == 0x5000
            launches = last.launches
            with pytest.raises(TypeError, match="argument 0"):
                k.launch(1, 32, [5])  # an int has no C type
            with pytest.raises(ValueError, match="grid"):
                k.launch(0, 32, [Tensor()])
            with pytest.raises(TypeError, match="stream"):
                k.launch(1, 32, [Tensor()], stream="default")
            fake.fake_cuda_last_launch(ctypes.byref(last))
            assert last.launches == launches  # none of those reached the driver
        finally:
            fake.cuCtxSetCurrent(None)
    with pytest.raises(ValueError, match="released"):
        k.launch(1, 32, [Tensor()])


@needs_driver
def test_as_cuda_core_keeps_the_kjit_kernel_alive(built, fake):
    # A stand-in for cuda.core (the real one needs a GPU): Kernel.from_handle of the CUkernel,
    # a class with no __dict__ but weak references, as cuda.core's cdef class. The kjit kernel
    # lives as long as the cuda.core object, and is released with it.
    r = _run_python("""
        import gc, sys, types, weakref, kjit
        class Kernel:
            __slots__ = ("handle", "__weakref__")
            @staticmethod
            def from_handle(handle):
                k = Kernel()
                k.handle = handle
                return k
        core_pkg, core = types.ModuleType("cuda"), types.ModuleType("cuda.core")
        core.Kernel = Kernel
        core_pkg.core = core
        sys.modules.update({"cuda": core_pkg, "cuda.core": core})
        k = kjit.load_cached(sys.argv[1], "scale")
        handle, watch = k.cukernel, weakref.ref(k)
        c = k.as_cuda_core()
        del k
        gc.collect()
        print(type(c).__name__, c.handle == handle, watch() is not None)
        del c
        gc.collect()
        print(watch() is None)
        """.replace("sys.argv[1]", repr(str(built.path))))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["Kernel", "True", "True", "True"], r.stdout


def test_as_cuda_core_says_what_it_needs(built):
    try:
        import cuda.core  # noqa: F401
        pytest.skip("cuda.core is installed: this checks the message without it")
    except ImportError:
        pass
    if not LIBCUDA:
        pytest.skip("KJIT_LIBCUDA is unset (no driver test double)")
    with kjit.load_cached(built.path, "scale") as k:
        with pytest.raises(ImportError, match="pip install cuda-core"):
            k.as_cuda_core()


@needs_driver
def test_load_errors(built, fake, tmp_path):
    with pytest.raises(kjit.KjitIOError) as info:
        kjit.load_cached(tmp_path / "missing.cubin", "scale")
    assert str(tmp_path / "missing.cubin") in info.value.message
    junk = tmp_path / "junk.cubin"
    junk.write_bytes(b"\0" * 256)
    with pytest.raises(kjit.BadCubin):
        kjit.load_cached(junk, "scale")
    with pytest.raises(kjit.NotFound):
        kjit.load_cached(built.path, "no_such_kernel")
    with pytest.raises(kjit.Ambiguous):
        kjit.load_cached(built.path, "scale_")


@needs_driver
def test_threads_load_and_release(built, fake):
    names, errors = [], []
    lock = threading.Lock()

    def work():
        try:
            for _ in range(50):
                with kjit.load_cached(built.path, "scale") as k:
                    with lock:
                        names.append(k.name)
        except BaseException as e:  # noqa: BLE001
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(names) == 400 and set(names) == {built.name}
    assert fake.counters().bad_handles == 0


@needs_driver
def test_kernels_alive_at_interpreter_exit(built, fake):
    r = _run_python(f"""
        import kjit
        kept = kjit.load_cached({built.path!r}, "scale")
        cycle = [kjit.load_cached({built.path!r}, "scale_a")]
        cycle.append(cycle)
        print(kept.name)
        """)
    assert r.returncode == 0 and r.stdout.strip() == built.name, r.stderr
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr


SIMPLE = "__global__ void scale(float *p) { p[0] *= 2.0f; }\n"


def test_results_are_frozen_dataclasses_that_read_by_name_too(tmp_path):
    s = kjit.stats()
    assert isinstance(s, kjit.Stats) and dataclasses.is_dataclass(s)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.compile_hits = 0
    # Code written when these were dicts still reads them; only fields are keys.
    assert s["compile_hits"] == s.compile_hits and s["errors"] is s.errors
    with pytest.raises(KeyError):
        s["struct_size"]
    # Every counter of kjit_stats, and every field of the cache structs, is a field here.
    def fields(result):
        return {f.name for f in dataclasses.fields(result)}

    def counters(struct):
        return {name for name, _ in struct._fields_} - {"struct_size"}

    assert counters(kjit._abi.Stats) == fields(kjit.Stats)
    assert counters(kjit._abi.CacheSummary) | {"cache_dir", "by_arch"} == fields(kjit.CacheStats)
    assert counters(kjit._abi.PruneReport) | {"cache_dir"} == fields(kjit.PruneReport)
    report = kjit.prune(tmp_path)
    assert isinstance(report, kjit.PruneReport) and report.cache_dir == str(tmp_path)
    assert repr(report).startswith("PruneReport(cache_dir=") and type(report).__module__ == "kjit"
    assert pickle.loads(pickle.dumps(report)) == report and hash(report) == hash(kjit.prune(tmp_path))
    assert hash(s) is not None  # the dict fields stay out of the hash


def test_import_leaves_the_costly_modules_for_later(tmp_path):
    # import kjit stays cheap (the bench's "ready from before import kjit" counts it): typing
    # and dataclasses (with inspect) come with the first result, ctypes.util with the search,
    # enum with the first error or kjit.Status, collections with the first batch. A compile
    # and its hits import none of them.
    r = _run_python(f"""
        import sys
        before = set(sys.modules)
        import kjit
        print(sorted(set(sys.modules) - before))
        for _ in range(2):  # a miss, then a hit
            kjit.compile_named("__global__ void k() {{}}", "k", cache_dir={str(tmp_path)!r}, arch="sm_90")
        kjit.prepare("__global__ void k() {{}}", "k", cache_dir={str(tmp_path)!r}, arch="sm_90").compile_named()
        print(sorted(set(sys.modules) - before))
        kjit.stats()
        print(sorted(set(sys.modules) - before))
        kjit.Status.OK
        print(sorted(set(sys.modules) - before))
        """)
    assert r.returncode == 0, r.stderr
    at_import, after_hits, after_stats, after_status = (eval(line) for line in r.stdout.splitlines())
    assert "kjit" in at_import and "kjit._abi" in at_import and "kjit._results" not in at_import
    later = ("enum", "collections", "functools", "threading", "weakref", "signal", "kjit._enums", "kjit._launch")
    for costly in ("typing", "dataclasses", "inspect", "ctypes.util", "datetime", "re") + later:
        assert costly not in at_import, at_import
    for costly in later:
        assert costly not in after_hits, after_hits
    assert "kjit._results" in after_stats
    assert "kjit._enums" in after_status


def test_error_classes_by_status_name():
    # kjit._errors keys its table by value, so that raising needs no enum: the values named.
    from kjit._errors import ERROR_CLASSES
    assert {kjit.Status(value).name: cls for value, cls in ERROR_CLASSES.items()} == {
        "ERROR_INVALID_ARGUMENT": kjit.InvalidArgument, "ERROR_NOT_FOUND": kjit.NotFound,
        "ERROR_AMBIGUOUS": kjit.Ambiguous, "ERROR_BAD_CUBIN": kjit.BadCubin, "ERROR_IO": kjit.KjitIOError,
        "ERROR_COMPILE": kjit.CompileError, "ERROR_NVRTC": kjit.CompileError,
        "ERROR_DRIVER_UNAVAILABLE": kjit.DriverError, "ERROR_DRIVER": kjit.DriverError,
        "ERROR_LINK": kjit.LinkError, "ERROR_NOT_CACHED": kjit.NotCachedError}


def test_remote_description_reads_every_server():
    text = ("server redis://a:6379\n  redis_version: 7.0.15\n  used_memory_human: 1.00M\n  keys: 12\n"
            "  libkjit entries (namespace llm): 3 (at least; the count stopped early)\n"
            "server redis://b:6379\n  unreachable: connect: Connection refused\n")
    described = kjit.RemoteDescription.parse(text)
    assert str(described) == text
    a, b = described.servers
    assert a == kjit.RemoteServer("redis://a:6379", True, None, {"redis_version": "7.0.15",
                                                                 "used_memory_human": "1.00M"}, 12, "llm", 3, False)
    assert b == kjit.RemoteServer("redis://b:6379", False, "connect: Connection refused")
    assert kjit.RemoteDescription.parse("").servers == []


def test_stats_count_hits_misses_and_errors(tmp_path):
    before = kjit.stats()
    src = SIMPLE + "\n// stats test\n"
    path = kjit.compile(src, "scale", cache_dir=tmp_path, arch="sm_90")
    assert kjit.compile(src, "scale", cache_dir=tmp_path, arch="sm_90") == path
    with pytest.raises(kjit.NotFound):
        kjit.resolve_name(path, "nosuch")
    after = kjit.stats()
    assert after.compile_misses - before.compile_misses == 1
    assert after.compile_hits - before.compile_hits == 1
    assert after.nvrtc_nanoseconds > before.nvrtc_nanoseconds
    assert after.errors.get("not found", 0) - before.errors.get("not found", 0) == 1
    assert set(after.sidecar_rejections) <= set(kjit.SIDECAR_REJECTIONS)


def test_max_cache_size_option(tmp_path, monkeypatch):
    monkeypatch.setenv("KJIT_CACHE_MAX_SIZE", "lots")
    with pytest.raises(kjit.InvalidArgument) as info:
        kjit.compile(SIMPLE, "scale", cache_dir=tmp_path, arch="sm_90")
    assert "KJIT_CACHE_MAX_SIZE" in info.value.message
    # An explicit limit (or inf) wins over the variable.
    runs = kjit.stats().eviction_runs
    kjit.compile(SIMPLE + "\n// limit\n", "scale", cache_dir=tmp_path, arch="sm_90", max_cache_size=1 << 30)
    assert kjit.stats().eviction_runs == runs + 1
    kjit.compile(SIMPLE + "\n// inf\n", "scale", cache_dir=tmp_path, arch="sm_90", max_cache_size=float("inf"))
    for bad in (0, -1, "5G", 2**64):
        with pytest.raises(ValueError):
            kjit.compile(SIMPLE, "scale", cache_dir=tmp_path, arch="sm_90", max_cache_size=bad)


def _numbered(i):
    return (f"template <int N> __global__ void gemm(float *p) {{ p[threadIdx.x] = N; }}\n"
            f"template __global__ void gemm<{i + 1}>(float *);\n")


def test_compile_batch_mixed_items_and_progress(tmp_path):
    hit = kjit.compile(_numbered(100), "gemm", cache_dir=tmp_path, arch="sm_90")
    broken = "__global__ void gemm(float *p) { p[0] = undeclared_in_batch; }\n"
    requests = [(_numbered(100), "gemm"), (_numbered(101), "gemm"), (broken, "gemm"), (_numbered(101), "gemm"),
                {"source": _numbered(102), "keyword": "gemm", "name_expression": "gemm<103>"}]
    seen = []
    thread = threading.get_ident()

    def progress(done, total, index, status, path):
        assert threading.get_ident() == thread  # on the calling thread
        seen.append((done, total, index, status, path))

    before = kjit.stats()
    items = kjit.compile_batch(requests, workers=2, progress=progress, cache_dir=tmp_path, arch="sm_90")
    after = kjit.stats()
    assert [i.status for i in items] == [kjit.Status.OK, kjit.Status.OK, kjit.Status.ERROR_COMPILE, kjit.Status.OK,
                                         kjit.Status.OK]
    assert items[0].cubin_path == hit and items[0].ok and items[0].error == ""
    assert items[1].cubin_path == items[3].cubin_path
    assert items[2].cubin_path is None and not items[2].ok and "undeclared_in_batch" in items[2].error
    assert kjit.resolve_name(items[4].cubin_path, "gemm") == "_Z4gemmILi103EEvPf"
    assert after.nvrtc_compiles - before.nvrtc_compiles == 3  # the duplicate and the hit ran none
    assert [s[0] for s in seen] == [1, 2, 3, 4, 5] and sorted(s[2] for s in seen) == [0, 1, 2, 3, 4]
    assert seen[0][2] == 0 and seen[0][3] == kjit.Status.OK and seen[0][4] == hit  # the hit, first
    assert all(s[1] == 5 for s in seen)


_BROKEN = "__global__ void gemm(float *p) { p[0] = undeclared_for_the_bar; }\n"


def test_compile_batch_progress_bar_with_tqdm(tmp_path, monkeypatch):
    # A stand-in for tqdm (not a Debian package the tests install): what the bar is asked.
    class FakeTqdm:
        made = []

        def __init__(self, **kwargs):
            self.kwargs, self.updates, self.postfix, self.closed = kwargs, 0, {}, False
            FakeTqdm.made.append(self)

        def update(self, n):
            self.updates += n

        def set_postfix(self, **kwargs):
            self.postfix = kwargs

        def close(self):
            self.closed = True

    module = type(sys)("tqdm")
    module.tqdm = FakeTqdm
    monkeypatch.setitem(sys.modules, "tqdm", module)
    requests = [(_numbered(150), "gemm"), (_BROKEN, "gemm"), (_numbered(151), "gemm")]
    items = kjit.compile_batch(requests, progress=True, cache_dir=tmp_path, arch="sm_90")
    assert [i.ok for i in items] == [True, False, True]
    [bar] = FakeTqdm.made
    assert bar.kwargs["total"] == 3 and bar.kwargs["unit"] == "kernel"
    assert bar.updates == 3 and bar.postfix == {"failed": 1} and bar.closed
    # An empty batch shows nothing; progress=False is no callback.
    assert kjit.compile_batch([], progress=True, cache_dir=tmp_path, arch="sm_90") == [] and len(FakeTqdm.made) == 1
    assert kjit.compile_batch(requests[:1], progress=False, cache_dir=tmp_path, arch="sm_90")[0].ok
    assert len(FakeTqdm.made) == 1
    with pytest.raises(TypeError, match="progress must be a callable, True or None, not str"):
        kjit.compile_batch(requests, progress="yes", cache_dir=tmp_path, arch="sm_90")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_compile_batch_progress_line_without_tqdm(tmp_path, monkeypatch, terminal):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    requests = [(_numbered(160 + i), "gemm") for i in range(3)] + [(_BROKEN, "gemm")]
    items = kjit.compile_batch(requests, progress=True, cache_dir=tmp_path, arch="sm_90")
    assert [i.ok for i in items] == [True, True, True, False]
    text = stderr.getvalue()
    # One line: rewritten in place (carriage returns) on a terminal, written once at the end
    # where stderr is a file; it ends with the total and the failures.
    assert text.endswith("kjit: 4/4 kernels, 1 failed\n") and text.count("\n") == 1, repr(text)
    assert text.startswith("\r") == terminal and ("\r" in text) == terminal, repr(text)


def test_compile_batch_cancel_and_callback_exception(tmp_path):
    kjit.compile(_numbered(110), "gemm", cache_dir=tmp_path, arch="sm_90")
    requests = [(_numbered(110 + i), "gemm") for i in range(5)]
    items = kjit.compile_batch(requests, progress=lambda *a: True, cache_dir=tmp_path, arch="sm_90")
    assert items[0].ok  # the hit, reported first, cancelled the rest before any compile
    assert all(i.status == kjit.Status.ERROR_CANCELLED and i.cubin_path is None for i in items[1:])
    assert kjit.status_string(kjit.Status.ERROR_CANCELLED) == "cancelled"

    def boom(*_):
        raise RuntimeError("from the callback")
    with pytest.raises(RuntimeError, match="from the callback"):
        kjit.compile_batch(requests, progress=boom, cache_dir=tmp_path, arch="sm_90")
    # Nothing but the hit reached the cache; a plain run then finishes the rest.
    assert len(list(tmp_path.rglob("kernel.cubin"))) == 1
    items = kjit.compile_batch(requests, workers=1, pch=kjit.PCH_OFF, cache_dir=tmp_path, arch="sm_90")
    assert all(i.ok for i in items)
    assert [kjit.resolve_name(i.cubin_path, "gemm") for i in items] == [
        f"_Z4gemmILi{111 + i}EEvPf" for i in range(5)]


def test_compile_named_gives_path_and_name(tmp_path):
    src = "template <int N> __global__ void gemm(float *p) { p[0] = N; }\n"
    for _ in range(2):  # a miss, then a hit
        before = kjit.stats()
        got = kjit.compile_named(src, "gemm", name_expression="gemm<5>", cache_dir=tmp_path, arch="sm_90")
        after = kjit.stats()
        assert isinstance(got, kjit.Compiled)
        assert got.name == "_Z4gemmILi5EEvPf" == kjit.resolve_name(got.cubin_path, "gemm")
        assert got.cubin_path == kjit.compile(src, "gemm", name_expression="gemm<5>", cache_dir=tmp_path, arch="sm_90")
    assert after.sidecar_hits - before.sidecar_hits <= 1  # the hit read the sidecar once at most
    path, name = got
    assert path.endswith("kernel.cubin") and name
    with pytest.raises(TypeError):
        kjit.compile_named(src, "gemm", no_such_option=1)
    with pytest.raises(kjit.CompileError):
        kjit.compile_named("__global__ void gemm(float *p) { p[0] = nope; }", "gemm", cache_dir=tmp_path,
                           arch="sm_90")
    items = kjit.compile_batch([(_numbered(140), "gemm"), ("bad source", "gemm")], cache_dir=tmp_path, arch="sm_90")
    assert items[0].kernel_name == "_Z4gemmILi141EEvPf" == kjit.resolve_name(items[0].cubin_path, "gemm")
    assert items[1].kernel_name is None
    status, cubin_path, error = items[0]  # still three fields
    assert status == kjit.Status.OK and error == ""


def test_compile_and_load_in_one_call(tmp_path):
    src = "template <int N> __global__ void gemm(float *p) { p[0] = N; }\n"
    with kjit.compile_and_load(src, "gemm", name_expression="gemm<9>", cache_dir=tmp_path, arch="sm_90") as k:
        assert k.name == "_Z4gemmILi9EEvPf"
        assert k.cubin_path == kjit.compile(src, "gemm", name_expression="gemm<9>", cache_dir=tmp_path, arch="sm_90")
        before = kjit.stats()
        with kjit.compile_and_load(src, "gemm", name_expression="gemm<9>", cache_dir=tmp_path, arch="sm_90") as again:
            assert again.cukernel == k.cukernel
        assert kjit.stats().load_reuses - before.load_reuses == 1
    with pytest.raises(kjit.CompileError):
        kjit.compile_and_load("__global__ void gemm(float *p) { p[0] = nope; }", "gemm", cache_dir=tmp_path,
                              arch="sm_90")
    with pytest.raises(TypeError):
        kjit.compile_and_load(src, "gemm", no_such_option=1)


def test_compile_options_are_encoded_once_per_distinct_set(tmp_path):
    lib = kjit._lib()
    options = ["-DX=1"]

    def request(**changes):
        given = {"cache_dir": str(tmp_path), "arch": "sm_90", "nvrtc_options": options, **changes}
        return lib._request("src", "gemm", tuple({**kjit._COMPILE_DEFAULTS, **given}.values()))
    first = request()
    assert request() is first and request(nvrtc_options=("-DX=1",)) is first
    options.append("-DY=2")  # the same list, changed: another struct
    second = request()
    assert second is not first and second._keep[2].nvrtc_option_count == 2
    # Through compile: a mapping of headers changed between calls compiles its new text.
    src = '#include "v.h"\n__global__ void gemm(float *p) { p[0] = V; }\n'
    headers = {"v.h": "#define V 1\n"}
    one = kjit.compile(src, "gemm", headers=headers, cache_dir=tmp_path, arch="sm_90")
    headers["v.h"] = "#define V 2\n"
    two = kjit.compile(src, "gemm", headers=headers, cache_dir=tmp_path, arch="sm_90")
    assert one != two
    assert kjit.compile(src, "gemm", headers={"v.h": "#define V 1\n"}, cache_dir=tmp_path, arch="sm_90") == one
    # Arguments that cannot be frozen still work (encoded each time).
    assert kjit.compile(src, "gemm", headers=iter([("v.h", "#define V 2\n")]), cache_dir=tmp_path, arch="sm_90") == two


def test_compile_batch_on_worker_processes(tmp_path):
    requests = [(_numbered(130 + i), "gemm") for i in range(3)]
    before = kjit.stats()
    items = kjit.compile_batch(requests, workers=2, worker_kind=kjit.WORKERS_PROCESSES, cache_dir=tmp_path / "p",
                               arch="sm_90")
    assert all(i.ok for i in items), [i.error for i in items]
    assert kjit.stats().nvrtc_compiles - before.nvrtc_compiles == 3  # run by the workers, counted here
    threads = kjit.compile_batch(requests, workers=2, worker_kind=kjit.WORKERS_THREADS, cache_dir=tmp_path / "t",
                                 arch="sm_90")
    for p, t in zip(items, threads):
        assert pathlib.Path(p.cubin_path).read_bytes() == pathlib.Path(t.cubin_path).read_bytes()
    for bad in (7, True, "processes"):
        with pytest.raises(ValueError, match="worker_kind"):
            kjit.compile_batch(requests, worker_kind=bad, cache_dir=tmp_path, arch="sm_90")


def test_compile_batch_bad_arguments(tmp_path):
    with pytest.raises(kjit.InvalidArgument, match="pch is 9"):
        kjit.compile_batch([(_numbered(1), "gemm")], pch=9, cache_dir=tmp_path, arch="sm_90")
    with pytest.raises(TypeError):
        kjit.compile_batch("not a list")
    with pytest.raises(TypeError):
        kjit.compile_batch([("only source",)])
    with pytest.raises(TypeError):
        kjit.compile_batch([(_numbered(1), "gemm")], no_such_option=1)
    with pytest.raises(ValueError):
        kjit.compile_batch([(_numbered(1), "gemm")], workers=-1)
    assert kjit.compile_batch([], cache_dir=tmp_path, arch="sm_90") == []
    items = kjit.compile_batch([(_numbered(1), "bad keyword!")], cache_dir=tmp_path, arch="sm_90")
    assert items[0].status == kjit.Status.ERROR_INVALID_ARGUMENT and "keyword" in items[0].error


# ---------------------------------------------------------------------------------------------
# NVRTC's PCH options in nvrtc_options (docs/batch.md, "NVRTC's PCH options"; issue 19 item 1).

# The CUDA toolkit's headers (ctest passes the build's; else the usual place). A CCCL header
# makes the compile heavy enough that NVRTC makes a PCH of it.
CUDA_INCLUDE = pathlib.Path(os.environ.get("KJIT_TEST_CUDA_INCLUDE") or "/usr/local/cuda/include")
PCH_SOURCE = textwrap.dedent("""\
    #include <cfg.h>
    #include <cuda/std/cstdint>
    template <int V> __global__ void gemm(float *p) { p[0] = V; }
    template __global__ void gemm<CFG>(float *);
    """)


@pytest.mark.skipif(not (CUDA_INCLUDE / "cccl/cuda/std/cstdint").is_file(),
                    reason=f"no CCCL under {CUDA_INCLUDE} (set KJIT_TEST_CUDA_INCLUDE)")
@pytest.mark.parametrize("spelling", ["--pch", "-pch"])
def test_pch_option_compiles_against_the_edited_header(tmp_path, spelling):
    """--pch goes through libkjit's PCH folder per header identity: after the header is edited,
    the next compile in the same process is built from the new text, not from the PCH NVRTC made
    of the old one (NVRTC reuses a PCH for any compile whose options match)."""
    inc = tmp_path / "inc"
    inc.mkdir()
    value = 30 if spelling == "--pch" else 40
    kwargs = dict(cache_dir=tmp_path / "cache", arch="sm_90", include_paths=[inc],
                  nvrtc_options=["-I" + str(CUDA_INCLUDE / "cccl"), "-std=c++17", spelling])
    (inc / "cfg.h").write_text(f"#define CFG {value}\n")
    first = kjit.compile(PCH_SOURCE, "gemm", **kwargs)
    assert kjit.resolve_name(first, "gemm") == f"_Z4gemmILi{value}EEvPf"
    (inc / "cfg.h").write_text(f"#define CFG {value + 1}\n")
    misses = kjit.stats().compile_misses
    second = kjit.compile(PCH_SOURCE, "gemm", **kwargs)
    # A miss, compiled into the entry of the header's new text (docs/cache-layout.md, "Several
    # results per source key"), beside the first.
    assert kjit.stats().compile_misses == misses + 1
    assert second != first
    assert kjit.resolve_name(second, "gemm") == f"_Z4gemmILi{value + 1}EEvPf"
    # Nor is the PCH: the same request without --pch is the same entry, a hit.
    plain = dict(kwargs, nvrtc_options=kwargs["nvrtc_options"][:-1])
    hits = kjit.stats().compile_hits
    assert kjit.compile(PCH_SOURCE, "gemm", **plain) == second
    assert kjit.stats().compile_hits == hits + 1


@pytest.mark.parametrize("options", [
    ["--create-pch={pch}"], ["-create-pch", "{pch}"], ["--use-pch={pch}"], ["-use-pch", "{pch}"],
    ["--pch-dir={dir}"], ["-pch-dir", "{dir}"], ["--pch", "--pch-dir={dir}"]])
def test_pch_options_naming_files_are_refused(tmp_path, options):
    """--create-pch, --use-pch and --pch-dir name PCH files or folders of the caller's, which
    NVRTC would use without checking the headers they were made from: InvalidArgument, naming
    the option, before anything is compiled or written."""
    pch, folder = tmp_path / "x.pch", tmp_path / "pchs"
    folder.mkdir()
    options = [o.format(pch=pch, dir=folder) for o in options]
    named = options[-1] if options[-1].startswith("-") else options[-2]
    named = named.split("=")[0]
    before = kjit.stats()
    with pytest.raises(kjit.InvalidArgument) as info:
        kjit.compile(_numbered(7), "gemm", cache_dir=tmp_path / "cache", arch="sm_90",
                     nvrtc_options=["-std=c++17"] + options)
    e = info.value
    assert e.status == kjit.Status.ERROR_INVALID_ARGUMENT and e.function == "kjit_compile"
    assert f"'{named}" in e.message, e.message
    assert kjit.stats().nvrtc_compiles == before.nvrtc_compiles
    assert not pch.exists() and not any(folder.iterdir())
    assert not list(tmp_path.rglob("*.cubin"))

# ---------------------------------------------------------------------------------------------
# Ctrl-C and exceptions during compile_batch (docs/python.md, "Ctrl-C and callbacks"). Each case
# runs a batch of distinct kernels on one worker in a child process, so a broken interrupt
# cannot hit pytest itself, and reports as JSON what the batch did. The child's deadline only
# turns a hang into a failure.

_INTERRUPT_CHILD = r"""
import json, os, pathlib, signal, sys, threading
import kjit

mode, cache, total = sys.argv[1], sys.argv[2], int(sys.argv[3])


def numbered(i):  # _numbered(i) of the tests
    return (f"template <int N> __global__ void gemm(float *p) {{ p[threadIdx.x] = N; }}\n"
            f"template __global__ void gemm<{i + 1}>(float *);\n", "gemm")


requests = [numbered(i) for i in range(total)]
reported, handled = [], []
first = threading.Event()


def send_sigint():  # from another thread, once the first item is done: the main thread is in C
    first.wait()
    os.kill(os.getpid(), signal.SIGINT)


def progress(done, total, index, status, path):
    reported.append([index, int(status)])
    if mode == "nested" and len(reported) == 1:  # a batch from the callback, interrupted
        kjit.compile_batch([numbered(1000 + i) for i in range(total)], workers=1, pch=kjit.PCH_OFF,
                           cache_dir=cache, arch="sm_90", progress=lambda *_: first.set())
        return
    if mode == "raises":
        raise RuntimeError("stop from the callback")
    if mode == "in_callback" and len(reported) == 1:
        os.kill(os.getpid(), signal.SIGINT)  # handled while this callback runs
    first.set()


def first_on_disk():
    while True:
        try:  # a temp folder may be renamed into place while rglob walks it
            if list(pathlib.Path(cache).rglob("kernel.cubin")):
                break
        except FileNotFoundError:
            pass
        first.wait(0.01)
    first.set()


if mode == "handler":
    signal.signal(signal.SIGINT, lambda signum, frame: handled.append(signum))
if mode in ("callback", "no_callback", "handler", "nested"):
    threading.Thread(target=send_sigint, daemon=True).start()
if mode == "no_callback":
    threading.Thread(target=first_on_disk, daemon=True).start()
outcome, items = "returned", []
try:
    items = kjit.compile_batch(requests, workers=1, pch=kjit.PCH_OFF, cache_dir=cache, arch="sm_90",
                               progress=None if mode == "no_callback" else progress)
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
except RuntimeError as e:
    outcome = "RuntimeError: " + str(e)
handler = signal.getsignal(signal.SIGINT)
print(json.dumps({"outcome": outcome, "reported": reported, "handled": handled,
                  "statuses": [int(i.status) for i in items],
                  "handler_restored": handler is signal.default_int_handler if mode != "handler" else
                                      getattr(handler, "__name__", "") == "<lambda>"}))
"""


def _interrupted_batch(mode, cache, total):
    env = _child_env()
    r = subprocess.run([sys.executable, "-c", _INTERRUPT_CHILD, mode, str(cache), str(total)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _published(cache):
    """The items whose entry is in the cache, by the instantiation in their source.cu."""
    return sorted(int(p.read_text().split("gemm<")[1].split(">")[0]) - 1 for p in pathlib.Path(cache).rglob("source.cu")
                  if (p.parent / "kernel.cubin").is_file())


def _assert_hits_now(cache, indices):
    """The items finished before the interrupt are complete entries in the cache: compiling them
    again in this process is a hit each, and NVRTC does not run."""
    before = kjit.stats()
    for i in indices:
        path = kjit.compile(_numbered(i), "gemm", cache_dir=cache, arch="sm_90")
        assert kjit.resolve_name(path, "gemm") == f"_Z4gemmILi{i + 1}EEvPf"
    after = kjit.stats()
    assert after.nvrtc_compiles == before.nvrtc_compiles
    assert after.compile_hits - before.compile_hits == len(indices)


@pytest.mark.parametrize("mode", ["callback", "in_callback"])
def test_ctrl_c_during_batch_with_callback_raises_keyboard_interrupt(tmp_path, mode):
    # SIGINT arrives while the batch runs in C (callback: handled at the next callback's entry,
    # where ctypes used to print "Exception ignored" and pass libkjit an undefined value) or
    # while the callback runs (in_callback): either way the batch stops at the next item and the
    # caller gets KeyboardInterrupt.
    total = 40
    out = _interrupted_batch(mode, tmp_path, total)
    assert out["outcome"] == "KeyboardInterrupt", out
    finished = [index for index, status in out["reported"] if status == kjit.Status.OK]
    assert len(out["reported"]) == len(finished) >= 1
    published = _published(tmp_path)
    assert len(published) < total  # cancelled: the items not started were not compiled
    assert set(finished) <= set(published)  # every item reported was published, and more may be
    _assert_hits_now(tmp_path, published)
    assert out["handler_restored"]


def test_ctrl_c_during_batch_without_callback_cancels_between_items(tmp_path):
    total = 40
    out = _interrupted_batch("no_callback", tmp_path, total)
    assert out["outcome"] == "KeyboardInterrupt", out
    published = _published(tmp_path)
    assert 1 <= len(published) < total
    _assert_hits_now(tmp_path, published)
    assert out["handler_restored"]


def test_ctrl_c_during_a_batch_started_from_a_callback_stops_both(tmp_path):
    total = 40
    out = _interrupted_batch("nested", tmp_path, total)
    assert out["outcome"] == "KeyboardInterrupt", out
    assert len(out["reported"]) == 1  # the outer batch: its first item, whose callback ran the inner one
    published = _published(tmp_path)
    assert out["reported"][0][0] in published
    assert any(i >= 1000 for i in published) and len(published) < 2 * total
    _assert_hits_now(tmp_path, published)
    assert out["handler_restored"]


def test_sigint_handler_of_the_program_runs_once_and_the_batch_goes_on(tmp_path):
    # A handler that does not raise is the program's choice: it runs (once), nothing is
    # cancelled, and it is the SIGINT handler again after the batch.
    total = 12
    out = _interrupted_batch("handler", tmp_path, total)
    assert out["outcome"] == "returned", out
    assert out["handled"] == [2]
    assert out["statuses"] == [0] * total
    assert out["handler_restored"]


def test_callback_exception_after_a_compile_propagates_and_cancels(tmp_path):
    total = 40
    out = _interrupted_batch("raises", tmp_path, total)
    assert out["outcome"] == "RuntimeError: stop from the callback", out
    assert len(out["reported"]) == 1  # not called again after it raised
    index, status = out["reported"][0]
    assert status == kjit.Status.OK
    published = _published(tmp_path)
    assert index in published and len(published) < total
    _assert_hits_now(tmp_path, published)


# --------------------------------------------------------------------------------------------
# Cache maintenance (libkjit 0.4): cache_stats, prune, verify, clear

def _cache_with_entries(cache, n):
    """n distinct entries compiled into ``cache``, made idle (used 1 to n hours ago, entry 0 the
    least recently): their cubin paths."""
    paths = []
    for i in range(n):
        paths.append(kjit.compile(SIMPLE + f"\n// maintenance {i}\n", "scale", cache_dir=cache, arch="sm_90"))
    now = time.time()
    for i, p in enumerate(paths):
        entry = os.path.dirname(p)
        os.utime(entry, (now, now - (n - i) * 3600))
    return paths


def test_cache_stats_counts_entries(tmp_path):
    cache = tmp_path / "cache"
    paths = _cache_with_entries(cache, 2)
    s = kjit.cache_stats(cache)
    assert s.cache_dir == str(cache)
    assert s.entries == 2 and s.bytes > 0
    assert s.by_arch == {"sm_90": kjit.ArchUsage(entries=2, bytes=s.bytes)}
    assert s.max_size is None and s.foreign == 0
    assert s.least_recent_use_ns < s.most_recent_use_ns
    assert s.oldest_created_ns % 10**9 == 0 and s.oldest_created_ns <= s.newest_created_ns
    assert os.path.exists(paths[0])
    # The default folder, as compile() finds it.
    empty = tmp_path / "nothing-here"
    os.environ["KJIT_CACHE_DIR"] = str(empty)
    try:
        assert kjit.cache_dir() == str(empty)
        assert kjit.cache_stats().entries == 0 and kjit.cache_stats().least_recent_use_ns is None
    finally:
        del os.environ["KJIT_CACHE_DIR"]
    assert not empty.exists()


def test_cache_stats_size_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("KJIT_CACHE_MAX_SIZE", "2G")
    assert kjit.cache_stats(tmp_path).max_size == 2 << 30
    monkeypatch.setenv("KJIT_CACHE_MAX_SIZE", "0x10")
    with pytest.raises(kjit.InvalidArgument) as info:
        kjit.cache_stats(tmp_path)
    assert "KJIT_CACHE_MAX_SIZE" in info.value.message and info.value.function == "kjit_cache_summarize"


def test_prune_by_age_and_by_size(tmp_path):
    cache = tmp_path / "cache"
    paths = _cache_with_entries(cache, 3)  # used 3, 2 and 1 hours ago
    report = kjit.prune(cache, older_than=datetime.timedelta(minutes=150))
    assert report.removed_entries == 1 and report.kept_entries == 2
    assert [os.path.exists(p) for p in paths] == [False, True, True]
    report = kjit.prune(cache, max_size=kjit.cache_stats(cache).bytes - 1)
    assert report.removed_entries == 1 and report.kept_entries == 1
    assert [os.path.exists(p) for p in paths] == [False, False, True]
    # No bound: nothing but stale temps goes.
    assert kjit.prune(cache).removed_entries == 0
    # Entries in use are spared.
    fresh = kjit.compile(SIMPLE + "\n// fresh\n", "scale", cache_dir=cache, arch="sm_90")
    report = kjit.prune(cache, max_size=0, older_than=0)
    assert report.removed_entries == 1 and report.spared_in_use == 1 and os.path.exists(fresh)


def test_prune_bad_arguments(tmp_path):
    for bad, error in ((-1, ValueError), ("5G", TypeError), (True, TypeError), (2**64, ValueError)):
        with pytest.raises(error):
            kjit.prune(tmp_path, max_size=bad)
    with pytest.raises(ValueError):
        kjit.prune(tmp_path, older_than=-5)
    with pytest.raises(TypeError):
        kjit.prune(tmp_path, older_than="30d")
    with pytest.raises(kjit.InvalidArgument) as info:  # more than libkjit can count in ns
        kjit.prune(tmp_path, older_than=20000 * 7 * 86400)
    assert "older_than_s" in info.value.message


def test_verify_finds_and_fixes_damage(tmp_path):
    cache = tmp_path / "cache"
    paths = _cache_with_entries(cache, 2)
    assert kjit.verify(cache) == kjit.VerifyReport(str(cache), 2, 2, [])
    os.truncate(paths[0], 100)
    open(paths[1] + ".name", "w").close()
    report = kjit.verify(cache)
    assert not report.clean and report.entries_checked == 2 and report.entries_ok == 0
    kinds = {p.kind: p for p in report.problems}
    assert set(kinds) == {kjit.CacheProblem.TRUNCATED_CUBIN, kjit.CacheProblem.SIDECAR_DAMAGED}
    assert kinds[kjit.CacheProblem.TRUNCATED_CUBIN].path == os.path.dirname(paths[0])
    assert paths[0] in kinds[kjit.CacheProblem.TRUNCATED_CUBIN].detail
    assert not any(p.fixed for p in report.problems) and all(p.action == "" for p in report.problems)
    fixed = kjit.verify(cache, fix=True)
    assert fixed.clean and all(p.fixed and p.action for p in fixed.problems)
    assert not os.path.exists(paths[0]) and kjit.resolve_name(paths[1], "scale")
    assert kjit.verify(cache) == kjit.VerifyReport(str(cache), 1, 1, [])


def test_seed_dirs_warm_an_empty_cache_without_nvrtc(tmp_path, monkeypatch):
    warm = tmp_path / "warm"
    _cache_with_entries(warm, 2)
    seed = tmp_path / "seed"
    exported = kjit.cache_export(seed, warm)
    assert (exported.copied_entries, exported.present_entries, exported.refused) == (2, 0, [])
    assert exported.cache_dir == str(warm) and exported.other_dir == str(seed) and exported.copied_bytes > 0
    assert kjit.cache_export(seed, warm).present_entries == 2
    assert kjit.cache_export(tmp_path / "other", warm, arch="sm_80").skipped_entries == 2
    before = kjit.stats()
    source = SIMPLE + "\n// maintenance 1\n"
    path = kjit.compile(source, "scale", cache_dir=tmp_path / "fresh", arch="sm_90", seed_dirs=[seed])
    after = kjit.stats()
    assert path.startswith(str(tmp_path / "fresh") + "/")
    assert after.nvrtc_compiles == before.nvrtc_compiles and after.seed_hits == before.seed_hits + 1
    # $KJIT_CACHE_SEED when the argument is not given; [] for none whatever it says.
    monkeypatch.setenv("KJIT_CACHE_SEED", str(seed))
    kjit.compile(source, "scale", cache_dir=tmp_path / "fresh2", arch="sm_90")
    assert kjit.stats().seed_hits == before.seed_hits + 2
    kjit.compile(source, "scale", cache_dir=tmp_path / "fresh3", arch="sm_90", seed_dirs=[])
    assert kjit.stats().nvrtc_compiles == before.nvrtc_compiles + 1
    with pytest.raises(TypeError):
        kjit.compile(source, "scale", cache_dir=tmp_path / "fresh4", arch="sm_90", seed_dirs=str(seed))


def test_a_seed_hits_under_another_install_prefix(tmp_path):
    # Issue 47's probe: tile.h under A/inc compiled and exported; the same tile.h under B/inc, an
    # empty cache and the seed: no NVRTC run. A header naming its file (__FILE__) hits only with
    # base folders, whose cubin then names the folder it was built in.
    source = ('#include "tile.h"\ntemplate <int V> __global__ void gemm(const char **p) { p[0] = WHERE; }\n'
              "template __global__ void gemm<CFG>(const char **);\n")
    for name, text in (("plain", '#define CFG 126\n#define WHERE "here"\n'),
                       ("named", "#define CFG 127\n#define WHERE __FILE__\n")):
        for prefix in ("A", "B"):
            inc = tmp_path / name / prefix / "inc"
            inc.mkdir(parents=True)
            (inc / "tile.h").write_text(text)
    def node(name, prefix, cache, **options):
        return kjit.compile(source, "gemm", cache_dir=tmp_path / cache, arch="sm_90",
                            nvrtc_options=["-I", str(tmp_path / name / prefix / "inc")], **options)
    node("plain", "A", "a")
    node("named", "A", "a")
    node("named", "A", "a-based", base_dirs=[tmp_path / "named" / "A"])
    seed = tmp_path / "seed"
    assert kjit.cache_export(seed, tmp_path / "a").copied_entries == 2
    assert kjit.cache_export(seed, tmp_path / "a-based").copied_entries == 1
    before = kjit.stats()
    plain = node("plain", "B", "b", seed_dirs=[seed])
    assert kjit.stats().nvrtc_compiles == before.nvrtc_compiles and kjit.resolve_name(plain, "gemm") == "_Z4gemmILi126EEvPPKc"
    node("named", "B", "b", seed_dirs=[seed])
    assert kjit.stats().nvrtc_compiles == before.nvrtc_compiles + 1
    node("named", "B", "b2", seed_dirs=[seed], base_dirs=[tmp_path / "named" / "B"])
    assert kjit.stats().nvrtc_compiles == before.nvrtc_compiles + 1


def test_cache_import_refuses_damaged_entries(tmp_path):
    seed = tmp_path / "seed"
    paths = _cache_with_entries(seed, 2)
    os.truncate(paths[0], 100)
    report = kjit.cache_import(seed, tmp_path / "cache")
    assert report.copied_entries == 1 and len(report.refused) == 1
    assert report.refused[0].path == os.path.dirname(paths[0])
    assert report.refused[0].kind == kjit.CacheProblem.TRUNCATED_CUBIN and report.refused[0].action == "not copied"
    assert kjit.verify(tmp_path / "cache") == kjit.VerifyReport(str(tmp_path / "cache"), 1, 1, [])
    with pytest.raises(kjit.KjitIOError):
        kjit.cache_import(tmp_path / "missing", tmp_path / "cache")


def test_clear_and_folder_errors(tmp_path):
    cache = tmp_path / "cache"
    paths = _cache_with_entries(cache, 1)
    kjit.compile(SIMPLE + "\n// in use\n", "scale", cache_dir=cache, arch="sm_90")
    report = kjit.clear(cache)
    assert report.removed_entries == 2 and report.kept_entries == 0 and not os.path.exists(paths[0])
    a_file = tmp_path / "a-file"
    a_file.write_text("not a cache")
    for call in (kjit.cache_stats, kjit.verify, kjit.clear, lambda d: kjit.prune(d, max_size=0)):
        with pytest.raises(kjit.KjitIOError) as info:
            call(a_file)
        assert str(a_file) in info.value.message
    with pytest.raises(TypeError):
        kjit.verify(42)


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path):
    """A redis-server of this test's own on 127.0.0.1 (installed by tests/run.sh: a test that
    cannot start one fails, it does not skip)."""
    port = _free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                import socket
                with socket.create_connection(("127.0.0.1", port), timeout=0.1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                time.sleep(0.01)
        else:
            pytest.fail(f"redis-server did not start on port {port}")
        yield f"redis://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def test_remote_storage_shares_a_compile_between_caches(tmp_path, redis_url):
    src = SIMPLE + "\n// remote test\n"
    before = kjit.stats()
    first = kjit.compile_named(src, "scale", cache_dir=tmp_path / "node-a", arch="sm_90", remote_storage=redis_url)
    second = kjit.compile_named(src, "scale", cache_dir=tmp_path / "node-b", arch="sm_90", remote_storage=redis_url)
    after = kjit.stats()
    assert first.name == second.name and first.cubin_path != second.cubin_path
    assert after.nvrtc_compiles - before.nvrtc_compiles == 1
    assert after.remote_puts - before.remote_puts == 1
    assert after.remote_hits - before.remote_hits == 1
    described = kjit.remote_describe(redis_url)
    assert "libkjit entries (namespace default): 1" in str(described)  # the text, as the CLI prints it
    [server] = described.servers
    assert server.url.startswith(redis_url) and server.reachable and server.error is None  # url + "/0"
    assert server.namespace == "default" and server.entries == 1 and server.entries_complete
    assert server.keys is not None and server.keys >= 1 and server.info["redis_version"][0].isdigit()


def test_remote_storage_errors_name_the_argument_and_hide_the_password(tmp_path):
    with pytest.raises(kjit.InvalidArgument) as info:
        kjit.compile(SIMPLE, "scale", cache_dir=tmp_path, arch="sm_90",
                     remote_storage="redis://admin:hunter2@host:notaport")
    assert "remote_storage" in info.value.message and "hunter2" not in info.value.message
    with pytest.raises(kjit.InvalidArgument):
        kjit.remote_describe("none")


def test_options_struct_stays_old_sized_without_newer_fields():
    # A libkjit older than 0.6 (0.7) refuses a larger struct: the 0.6 (0.7) field only when used.
    plain = kjit._convert.compile_options([], arch="sm_90")
    remote = kjit._convert.compile_options([], arch="sm_90", remote_storage="none")
    named = kjit._convert.compile_options([], arch="sm_90", filename="gemm.cu")
    seeded = kjit._convert.compile_options([], arch="sm_90", seed_dirs=["/seed"])
    assert plain.struct_size == kjit._abi.CompileOptions.remote_storage.offset
    assert remote.struct_size == kjit._abi.CompileOptions.program_name.offset
    assert named.struct_size == kjit._abi.CompileOptions.seed_dirs.offset
    assert named.program_name == b"gemm.cu"
    assert seeded.struct_size == kjit._abi.CompileOptions.link_inputs.offset  # the link fields: test_link.py
    assert seeded.seed_dir_count == 1 and seeded.seed_dirs[0] == b"/seed"


def test_filename_names_the_program_in_the_log_and_the_key(tmp_path):
    named = kjit.compile(SIMPLE, "scale", cache_dir=tmp_path, arch="sm_90", filename="scale_module.cu")
    assert named != kjit.compile(SIMPLE, "scale", cache_dir=tmp_path, arch="sm_90")
    assert named == kjit.compile(SIMPLE, "scale", cache_dir=tmp_path, arch="sm_90",
                                 filename=pathlib.Path("scale_module.cu"))
    with pytest.raises(kjit.CompileError, match=r"broken_module\.cu\("):
        kjit.compile("__global__ void scale() { undeclared(); }", "scale", cache_dir=tmp_path, arch="sm_90",
                     filename="broken_module.cu")
