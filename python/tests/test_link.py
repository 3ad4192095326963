"""Link-time kernels from Python: ``link_inputs=`` and ``link_options=`` (libkjit 0.10).

A device-function library is compiled to LTO-IR by NVRTC here (nvrtc_ltoir.py, through
ctypes), written to a file, and kernels that call it are compiled with ``link_inputs=[file]``:
libkjit compiles them to LTO-IR, links them with the file through nvJitLink for sm_90 and caches
the linked cubin. Neither needs a GPU. The library returns a distinctive constant, which the
linked cubin carries as an immediate operand: reading it back shows which library a cubin was
linked with.

Environment: as test_kjit.py (KJIT_LIBRARY, KJIT_TEST_CUDA_INCLUDE); NVRTC as nvrtc_ltoir.py
finds it, nvJitLink as libkjit does.
"""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent
INSTALLED = os.environ.get("KJIT_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, str(PYTHON_DIR))

import kjit  # noqa: E402
from nvrtc_ltoir import write_ltoir  # noqa: E402

ARCH = "sm_90"
FIRST, SECOND = 0x5EED1234, 0x0BADF00D


def library(value):
    """A device-function library: lib_value() returns ``value``."""
    return f'extern "C" __device__ int lib_value() {{ return {value:#x}; }}\n'


# The kernel calls the library's function, which only the link supplies.
KERNEL = textwrap.dedent("""\
    extern "C" __device__ int lib_value();
    extern "C" __global__ void use_lib(int *out) { *out = lib_value(); }
    """)
# A templated kernel, named by a name expression in the user's source.
TEMPLATED = textwrap.dedent("""\
    extern "C" __device__ int lib_value();
    template <int N> __global__ void use_lib_times(int *out) { *out = N * lib_value(); }
    """)


def carries(cubin_path, value):
    """True when the cubin holds ``value`` as a 32-bit little-endian word (the immediate the
    inlined lib_value() stores)."""
    return value.to_bytes(4, "little") in pathlib.Path(cubin_path).read_bytes()


@pytest.fixture
def lib_file(tmp_path):
    return write_ltoir(tmp_path / "lib.ltoir", library(FIRST), ARCH)


def _counts():
    s = kjit.stats()
    return s.nvrtc_compiles, s.nvjitlink_links


def test_link_inputs_build_hit_miss_on_edit_and_hit_on_revert(tmp_path, lib_file):
    cache = tmp_path / "cache"
    nvrtc0, links0 = _counts()
    first = kjit.compile_named(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file])
    assert first.name == "use_lib" and first.cubin_path.startswith(str(cache) + "/")
    assert carries(first.cubin_path, FIRST) and not carries(first.cubin_path, SECOND)
    assert _counts() == (nvrtc0 + 1, links0 + 1)
    assert kjit.resolve_name(first.cubin_path, "use_lib") == "use_lib"

    # The same request again: a hit, neither NVRTC nor nvJitLink runs (pathlib.Path or str alike).
    assert kjit.compile(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[pathlib.Path(lib_file)]) \
        == first.cubin_path
    assert _counts() == (nvrtc0 + 1, links0 + 1)

    # The library edited (the same path, another constant): a miss, a cubin with the new code.
    write_ltoir(lib_file, library(SECOND), ARCH)
    second = kjit.compile_named(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file])
    assert second.cubin_path != first.cubin_path and second.name == "use_lib"
    assert carries(second.cubin_path, SECOND) and not carries(second.cubin_path, FIRST)
    assert _counts()[1] == links0 + 2

    # Put back: the first entry, with no compile and no link.
    before = _counts()
    write_ltoir(lib_file, library(FIRST), ARCH)
    assert kjit.compile(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file]) == first.cubin_path
    assert _counts() == before


def test_link_options_and_the_name_expression(tmp_path, lib_file):
    cache = tmp_path / "cache"
    plain = kjit.compile(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file])
    optimized = kjit.compile(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file],
                             link_options=["-O3"])
    assert optimized != plain and carries(optimized, FIRST)  # the link options are in the key
    templated = kjit.compile_named(TEMPLATED, "use_lib_times", cache_dir=cache, arch=ARCH,
                                   name_expression="use_lib_times<3>", link_inputs=(lib_file,))
    assert templated.name == "_Z13use_lib_timesILi3EEvPi"
    assert carries(templated.cubin_path, 3 * FIRST % 2**32)


def test_link_inputs_in_a_batch_and_a_prepared_request(tmp_path, lib_file):
    cache = tmp_path / "cache"
    items = kjit.compile_batch([{"source": KERNEL, "keyword": "use_lib", "link_inputs": [lib_file]},
                                (KERNEL, "use_lib")], cache_dir=cache, arch=ARCH)
    linked, unlinked = items
    assert linked.ok and linked.kernel_name == "use_lib" and carries(linked.cubin_path, FIRST)
    # Without the library the kernel's call is unresolved: the link is what the item's option adds.
    assert not unlinked.ok and "lib_value" in unlinked.error
    prepared = kjit.prepare(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file])
    assert prepared.compile() == linked.cubin_path


def test_link_errors(tmp_path, lib_file):
    cache = tmp_path / "cache"
    missing = tmp_path / "no-such-lib.ltoir"
    with pytest.raises(kjit.KjitIOError) as info:
        kjit.compile(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file, missing])
    assert info.value.status == kjit.Status.ERROR_IO and str(missing) in info.value.message

    text = tmp_path / "notes.txt"
    text.write_text("not a device library\n")
    with pytest.raises(kjit.InvalidArgument) as info:
        kjit.compile(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[text])
    assert str(text) in info.value.message

    # A function no input defines: nvJitLink's log, naming it, in the LinkError; nothing published.
    calls_other = KERNEL.replace("lib_value", "lib_other")
    with pytest.raises(kjit.LinkError) as info:
        kjit.compile(calls_other, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file])
    assert info.value.status == kjit.Status.ERROR_LINK and info.value.function == "kjit_compile"
    assert "lib_other" in info.value.message and "LINK" in str(info.value)
    assert isinstance(info.value, kjit.KjitError)
    assert not list(cache.glob("*/*/kernel.cubin"))

    # Code without a kernel: the linked cubin has none.
    no_kernel = ('extern "C" __device__ int lib_value();\n'
                 'extern "C" __device__ int twice() { return 2 * lib_value(); }\n')
    with pytest.raises(kjit.NotFound):
        kjit.compile(no_kernel, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file])

    with pytest.raises(TypeError):  # one path is not a list of paths
        kjit.compile(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=str(lib_file))
    with pytest.raises(TypeError):
        kjit.compile(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file], link_options="-O3")


def _run_python(code, **env_changes):
    path = [] if INSTALLED else [str(PYTHON_DIR)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path + [os.environ.get("PYTHONPATH")])))
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


CHILD = """
    import sys, kjit
    try:
        path = kjit.compile(sys.argv[1], "use_lib", cache_dir=sys.argv[2], arch="sm_90", link_inputs=[sys.argv[3]])
        print("path", path)
    except kjit.KjitError as e:
        print("error", type(e).__name__, e.message)
    s = kjit.stats()
    print("counts", s.nvrtc_compiles, s.nvjitlink_links)
    print("nvJitLink mapped", any("libnvJitLink" in line for line in open("/proc/self/maps")))
    """


def _child(source, cache, lib, **env):
    code = CHILD.replace("sys.argv[1]", repr(source)).replace("sys.argv[2]", repr(str(cache)))
    r = _run_python(code.replace("sys.argv[3]", repr(str(lib))), **env)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_a_fresh_process_hits_without_nvrtc_or_nvjitlink(tmp_path, lib_file):
    cache = tmp_path / "cache"
    path = kjit.compile(KERNEL, "use_lib", cache_dir=cache, arch=ARCH, link_inputs=[lib_file])
    out = _child(KERNEL, cache, lib_file)
    assert out == [f"path {path}", "counts 0 0", "nvJitLink mapped False"], out


def test_nvjitlink_is_needed_by_links_only(tmp_path, lib_file):
    broken = str(tmp_path / "missing" / "libnvJitLink.so.13")
    out = _child(KERNEL, tmp_path / "cache", lib_file, KJIT_LIBNVJITLINK=broken)
    assert out[0].startswith("error LinkError") and broken in out[0], out
    assert out[1].startswith("counts ") and out[1].endswith(" 0"), out
    r = _run_python(f"""
        import kjit
        print(kjit.compile_named('__global__ void plain(int *p) {{ *p = 1; }}', "plain",
                                 cache_dir={str(tmp_path / "cache")!r}, arch="sm_90").name)
        """, KJIT_LIBNVJITLINK=broken)
    assert r.returncode == 0 and r.stdout.split() == ["_Z5plainPi"], r.stderr


def test_the_struct_reaches_0_10_only_with_link_arguments():
    # A libkjit older than 0.10 refuses a larger struct: the link fields only when used.
    seeded = kjit._convert.compile_options([], arch=ARCH, seed_dirs=["/seed"])
    linked = kjit._convert.compile_options([], arch=ARCH, link_inputs=["/lib/a.ltoir", b"/lib/b.fatbin"])
    optioned = kjit._convert.compile_options([], arch=ARCH, link_options=["-O3"])
    empty = kjit._convert.compile_options([], arch=ARCH, link_inputs=[], link_options=())
    assert seeded.struct_size == kjit._abi.CompileOptions.link_inputs.offset
    assert linked.struct_size == optioned.struct_size == kjit._abi.CompileOptions.compile_mode.offset
    moded = kjit._convert.compile_options([], arch=ARCH, compile_mode="never")
    assert moded.struct_size == kjit._abi.CompileOptions.base_dirs.offset and moded.compile_mode == 3
    assert empty.struct_size == kjit._abi.CompileOptions.remote_storage.offset
    assert linked.link_input_count == 2 and linked.link_inputs[1] == b"/lib/b.fatbin"
    assert linked.link_option_count == 0
    assert optioned.link_option_count == 1 and optioned.link_options[0] == b"-O3"
    with pytest.raises(ValueError):
        kjit._convert.compile_options([], link_inputs=["/lib/a\0b"])


def test_the_installed_package_finds_the_nvjitlink_wheel(tmp_path, monkeypatch):
    # What the installed package does (its kjit._build holds libkjit's CUDA major): with
    # $KJIT_LIBNVJITLINK unset, it is pointed at the nvidia-nvjitlink wheel's library on sys.path
    # (nvidia/cu13/lib for 13, nvidia/nvjitlink/lib for 12), and a value given is left alone.
    import types

    build = types.ModuleType("kjit._build")
    monkeypatch.setitem(sys.modules, "kjit._build", build)
    monkeypatch.delenv("KJIT_LIBNVJITLINK", raising=False)
    for major, folder in ((13, "cu13"), (12, "nvjitlink")):
        build.NVRTC_MAJOR = major
        site = tmp_path / str(major)
        monkeypatch.setattr(sys, "path", [str(tmp_path / "empty"), str(site)])
        assert kjit._nvjitlink_from_wheel() is None and "KJIT_LIBNVJITLINK" not in os.environ
        wheel = site / "nvidia" / folder / "lib" / f"libnvJitLink.so.{major}"
        wheel.parent.mkdir(parents=True)
        wheel.write_bytes(b"")
        assert kjit._nvjitlink_from_wheel() == str(wheel) == os.environ["KJIT_LIBNVJITLINK"]
        monkeypatch.setenv("KJIT_LIBNVJITLINK", "/opt/mine/libnvJitLink.so")
        assert kjit._nvjitlink_from_wheel() is None
        assert os.environ["KJIT_LIBNVJITLINK"] == "/opt/mine/libnvJitLink.so"
        monkeypatch.delenv("KJIT_LIBNVJITLINK")
