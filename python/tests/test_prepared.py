"""Prepared requests (kjit.prepare) and the memo of the plain calls' requests, against the built
libkjit.so: a repeat makes one C call, and libkjit still proves the entry on every one.

Environment as for test_kjit.py (KJIT_LIBRARY; cubins for arch sm_90 into temporary caches).
"""

import os
import pathlib
import sys
import threading

import pytest

PYTHON_DIR = pathlib.Path(__file__).resolve().parent.parent
if os.environ.get("KJIT_TEST_INSTALLED") != "1":
    sys.path.insert(0, str(PYTHON_DIR))

import kjit  # noqa: E402

SOURCE = '#include "v.h"\nextern "C" __global__ void gemm(float *p) { p[0] = V; }\n'


@pytest.fixture
def tree(tmp_path):
    """A cache folder and an include folder whose v.h the kernel reads."""
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "v.h").write_text("#define V 1\n")
    return tmp_path


def _options(tree, **more):
    return dict(cache_dir=str(tree / "cache"), arch="sm_90", include_paths=(str(tree / "include"),), **more)


def _compiles():
    return kjit.stats().nvrtc_compiles


def _values(options):
    """compile()'s keyword arguments as a plain call's request holds them: every one, in order."""
    return tuple({**kjit._COMPILE_DEFAULTS, **options}.values())


def test_a_prepared_request_gives_what_the_plain_calls_give(tree):
    prepared = kjit.prepare(SOURCE, "gemm", **_options(tree))
    got = prepared.compile_named()
    assert isinstance(got, kjit.Compiled) and got == kjit.compile_named(SOURCE, "gemm", **_options(tree))
    assert got.name == "gemm" and pathlib.Path(got.cubin_path).is_file()
    assert prepared.compile() == got.cubin_path == kjit.compile(SOURCE, "gemm", **_options(tree))
    before = _compiles()
    assert prepared.compile_named() == got and prepared.compile_named() == got  # hits
    assert _compiles() == before
    assert prepared.keyword == "gemm" and prepared.options["arch"] == "sm_90" and "gemm" in repr(prepared)
    assert type(prepared) is kjit.Prepared and kjit.Prepared.__module__ == "kjit"


@pytest.mark.parametrize("plain", [False, True], ids=["prepared", "plain"])
def test_a_repeat_after_a_header_is_edited_gives_the_new_entry(tree, plain):
    if plain:  # the plain call, through the memo of prepared requests
        def call():
            return kjit.compile_named(SOURCE, "gemm", **_options(tree))
    else:
        call = kjit.prepare(SOURCE, "gemm", **_options(tree)).compile_named
    first = call()
    first_bytes = pathlib.Path(first.cubin_path).read_bytes()
    assert call() == first
    (tree / "include" / "v.h").write_text("#define V 2\n")  # the same size: only the text differs
    before = _compiles()
    second = call()
    assert _compiles() == before + 1
    assert pathlib.Path(second.cubin_path).read_bytes() != first_bytes
    assert call() == second
    (tree / "include" / "v.h").write_text("#define V 1\n")  # back: the first entry again, a hit
    before = _compiles()
    assert call() == first and _compiles() == before
    assert pathlib.Path(first.cubin_path).read_bytes() == first_bytes


def test_a_repeat_after_the_cubin_is_damaged_or_removed_gives_a_good_cubin(tree):
    prepared = kjit.prepare(SOURCE, "gemm", **_options(tree))
    got = prepared.compile_named()
    good = pathlib.Path(got.cubin_path).read_bytes()
    for damage in (lambda p: p.write_bytes(b"junk"), lambda p: p.unlink()):
        damage(pathlib.Path(got.cubin_path))
        before = _compiles()
        again = prepared.compile_named()
        assert _compiles() == before + 1  # proven changed, compiled again
        assert again == got and pathlib.Path(again.cubin_path).read_bytes() == good
        assert kjit.resolve_name(again.cubin_path, "gemm") == "gemm"


# Bad Python arguments: the exception compile() raises, raised by prepare() itself.
BAD_PYTHON_ARGUMENTS = [
    ((5, "gemm"), {}),
    ((SOURCE, b"gemm"), {}),
    ((SOURCE + "\0", "gemm"), {}),
    ((SOURCE, "gemm"), {"nvrtc_options": "-DX=1"}),
    ((SOURCE, "gemm"), {"include_paths": [5]}),
    ((SOURCE, "gemm"), {"max_cache_size": 1.0}),
    ((SOURCE, "gemm"), {"max_cache_size": -1}),
    ((SOURCE, "gemm"), {"headers": [("v.h",)]}),
    ((SOURCE, "gemm"), {"no_such_option": 1}),
]


@pytest.mark.parametrize("args, bad", BAD_PYTHON_ARGUMENTS)
def test_bad_python_arguments_raise_what_compile_raises(tree, args, bad):
    with pytest.raises((TypeError, ValueError)) as plain:
        kjit.compile(*args, **_options(tree), **bad)
    with pytest.raises((TypeError, ValueError)) as prepared:
        kjit.prepare(*args, **_options(tree), **bad)
    assert type(prepared.value) is type(plain.value)
    assert str(prepared.value).replace("prepare()", "compile()") == str(plain.value)


# libkjit's errors: raised by each call of the prepared request, as compile() raises them.
BAD_REQUESTS = [
    (SOURCE, "gemm", {"arch": "compute_90"}, kjit.InvalidArgument),
    (SOURCE, "gemm", {"nvrtc_options": ("-arch=sm_80",)}, kjit.InvalidArgument),
    (SOURCE, "gemm", {"nvrtc_options": ("--no-such-nvrtc-option",)}, kjit.CompileError),
    ('extern "C" __global__ void gemm(float *p) { p[0] = nope; }', "gemm", {}, kjit.CompileError),
    (SOURCE, "other", {}, kjit.NotFound),
]


@pytest.mark.parametrize("source, keyword, bad, error", BAD_REQUESTS)
def test_libkjit_errors_are_raised_by_every_call_as_compile_raises_them(tree, source, keyword, bad, error):
    options = {**_options(tree), **bad}
    with pytest.raises(error) as plain:
        kjit.compile(source, keyword, **options)
    prepared = kjit.prepare(source, keyword, **options)
    for call in (prepared.compile_named, prepared.compile_named, prepared.compile):
        with pytest.raises(error) as got:
            call()
        assert got.value.status == plain.value.status and got.value.message == plain.value.message


def test_the_memo_keys_equal_requests_only(tree):
    lib = kjit._lib()
    fast = (SOURCE, "gemm", *_values(_options(tree)))
    kjit.compile_named(SOURCE, "gemm", **_options(tree))
    assert fast in lib._requests  # plain arguments: kept under the arguments as given
    # A list and a tuple of the same options encode alike: one request.
    one = lib._request(SOURCE, "gemm", _values(_options(tree, nvrtc_options=["-DX=1"])))
    assert lib._request(SOURCE, "gemm", _values(_options(tree, nvrtc_options=("-DX=1",)))) is one
    # A tuple that looks like a frozen list is not one: "seq" reaches NVRTC, which refuses it.
    with pytest.raises(kjit.CompileError):
        kjit.compile_named(SOURCE, "gemm", **_options(tree, nvrtc_options=("seq", "-DX=1")))
    # A size taken as an int is still refused as a float equal to it.
    kjit.compile_named(SOURCE, "gemm", **_options(tree, max_cache_size=1 << 40))
    with pytest.raises(ValueError, match="max_cache_size"):
        kjit.compile_named(SOURCE, "gemm", **_options(tree, max_cache_size=float(1 << 40)))
    # str and bytes sources are two requests, each giving the same entry.
    assert kjit.compile_named(SOURCE.encode(), "gemm", **_options(tree)) == kjit.compile_named(
        SOURCE, "gemm", **_options(tree))


COMPILE_LIKE = ("compile", "compile_named", "prepare", "compile_and_load", "compile_batch")


@pytest.mark.parametrize("where", ["module", "library"])
@pytest.mark.parametrize("function", COMPILE_LIKE)
def test_each_keyword_argument_reaches_the_request_as_given(monkeypatch, where, function):
    # Each function names compile()'s keyword arguments one by one and forwards them: each must
    # arrive under its own name, the others at their defaults.
    class Encoded(Exception):
        pass

    seen = []

    def encode(keep, **options):
        seen.append(options)
        raise Encoded

    monkeypatch.setattr(kjit._convert, "compile_options", encode)
    call = getattr(kjit if where == "module" else kjit._lib(), function)
    for name in kjit._COMPILE_KEYWORDS:
        value = f"<{name} of {where} {function}>"  # plain and new: no request in the memo has it
        # A name expression alone is new to a set the memo has encoded: forwarded by a copy of
        # that set's struct (Memo.encoded_options); forgotten here, it is encoded whole.
        kjit._lib()._memo.encoded.clear()
        with pytest.raises(Encoded):
            if function == "compile_batch":
                call([(SOURCE, "gemm")], **{name: value})
            else:
                call(SOURCE, "gemm", **{name: value})
        options = seen.pop()
        assert set(options) <= set(kjit._COMPILE_KEYWORDS)
        given = {k: v for k, v in options.items() if v is not kjit._COMPILE_DEFAULTS[k]}
        assert given == {name: value}, (name, options)
    # A misspelt keyword is refused as before, naming the function and the keyword.
    with pytest.raises(TypeError, match=rf"{function}\(\) got an unexpected keyword argument 'name_expr'"):
        if function == "compile_batch":
            call([(SOURCE, "gemm")], name_expr="gemm")
        else:
            call(SOURCE, "gemm", name_expr="gemm")
    assert not seen


def test_prepare_keeps_the_arguments_given(tree):
    prepared = kjit.prepare(SOURCE, "gemm", **_options(tree), name_expression=None)
    assert prepared.options == _options(tree)  # those left at their defaults left out


@pytest.mark.parametrize("function", ["compile", "compile_named", "compile_and_load"])
def test_a_plain_repeat_is_one_look_up(tree, monkeypatch, function):
    # The arguments as given are the memo's key: a repeat never makes a request.
    lib = kjit._lib()
    call = getattr(kjit, function)
    if function == "compile_and_load":
        monkeypatch.setattr(kjit.Prepared, "compile_and_load", kjit.Prepared.compile_named)  # no driver needed
    first = call(SOURCE, "gemm", **_options(tree), filename="gemm.cu", link_options=())
    kept = len(lib._requests)

    def made(*args):
        raise AssertionError("a repeat made a request")

    monkeypatch.setattr(kjit._prepared.Memo, "prepare", made)
    if function == "compile_named":  # its look-up is inline: a repeat does not even call _request
        monkeypatch.setattr(kjit.Library, "_request", made)
    assert call(SOURCE, "gemm", **_options(tree), filename="gemm.cu", link_options=()) == first
    assert len(lib._requests) == kept
    monkeypatch.undo()
    if function == "compile_and_load":
        monkeypatch.setattr(kjit.Prepared, "compile_and_load", kjit.Prepared.compile_named)
    monkeypatch.setattr(kjit._prepared.Memo, "prepare", made)
    assert getattr(lib, function)(SOURCE, "gemm", **_options(tree), filename="gemm.cu") == first


def test_the_memo_is_bounded(tree, monkeypatch):
    monkeypatch.setattr(kjit.Library, "_MEMO_MAX_ENTRIES", 3)
    lib = kjit.Library(kjit._lib().path)
    sources = [SOURCE + f"// {i}\n" for i in range(8)]
    for source in sources:
        lib.compile_named(source, "gemm", **_options(tree))
        assert len(lib._requests) <= 3
    monkeypatch.setattr(kjit.Library, "_MEMO_MAX_BYTES", len(SOURCE) * 2)
    lib = kjit.Library(kjit._lib().path)
    for source in sources:
        lib.compile_named(source, "gemm", **_options(tree))
        assert lib._memo.bytes <= len(SOURCE) * 2 + 16


def test_buffers_grow_to_the_reported_lengths(tree, monkeypatch):
    expected = kjit.compile_named(SOURCE, "gemm", **_options(tree))
    monkeypatch.setattr(kjit.Library, "path_buffer_size", 8)
    monkeypatch.setattr(kjit.Library, "name_buffer_size", 2)
    lib = kjit.Library(kjit._lib().path)  # its first calls' buffers too small as well
    for _ in range(2):  # a first call (the library's buffers), then a request's own
        assert lib.prepare(SOURCE, "gemm", **_options(tree)).compile_named() == expected
        assert lib.prepare(SOURCE, "gemm", **_options(tree)).compile() == expected.cubin_path
        assert lib.compile_named(SOURCE + "// plain\n", "gemm", **_options(tree)).name == "gemm"


def test_a_new_requests_first_call_answers_into_the_librarys_buffers(tree):
    # Most requests of a sweep are asked once: a first call makes no buffers of its own (the
    # library's serve it), the second makes them; both give the same answer.
    lib = kjit._lib()
    source = SOURCE + "// new\n"
    first = kjit.compile_named(source, "gemm", **_options(tree))
    request = lib._requests[(source, "gemm", *_values(_options(tree)))]
    assert request._path is None and first.name == "gemm"
    assert kjit.compile_named(source, "gemm", **_options(tree)) is first
    assert request._path is not None
    # A plain call's request reads out its options only when asked: all of compile's, in order.
    assert request.options == {**kjit._COMPILE_DEFAULTS, **_options(tree)}
    assert list(request.options) == list(kjit._COMPILE_KEYWORDS)
    # A failing first call raises and leaves the library's buffers free.
    with pytest.raises(kjit.NotFound):
        kjit.compile_named(SOURCE, "other", **_options(tree))
    shared = lib._shared_out[0]
    assert shared.acquire(False)
    shared.release()


def test_a_first_call_that_finds_the_librarys_buffers_busy_uses_its_own(tree):
    lib = kjit._lib()
    expected = kjit.compile_named(SOURCE, "gemm", **_options(tree))
    shared = lib._shared_out[0]
    assert shared.acquire(False)  # as another thread in a first call would hold it
    try:
        got = kjit.compile_named(SOURCE, "gemm", **_options(tree), filename="busy.cu")
        with pytest.raises(kjit.NotFound):
            kjit.compile_named(SOURCE, "other", **_options(tree), filename="busy.cu")
    finally:
        shared.release()
    request = lib._requests[(SOURCE, "gemm", *_values(_options(tree, filename="busy.cu")))]
    assert request._path is not None and got.name == "gemm" and got.cubin_path != expected.cubin_path


def test_new_requests_from_threads_each_get_their_own_answer(tree):
    # First calls from many threads at once: through the library's buffers one at a time, the
    # others through their own; every answer is its own request's.
    sources = [SOURCE + f"// thread {i}\n" for i in range(40)]
    expected = {s: kjit.prepare(s, "gemm", **_options(tree)).compile_named() for s in sources}
    kjit._lib()._memo.requests.clear()
    results, errors = [], []

    def run(offset):
        try:
            for i in range(len(sources)):
                s = sources[(i + offset) % len(sources)]
                results.append((s, kjit.compile_named(s, "gemm", **_options(tree))))
        except Exception as e:  # noqa: BLE001: reported by the assert below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(7 * t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 160
    assert all(got == expected[s] for s, got in results)


def test_threads_share_a_prepared_request(tree):
    prepared = kjit.prepare(SOURCE, "gemm", **_options(tree))
    expected = prepared.compile_named()
    results, errors = [], []

    def run():
        try:
            for _ in range(300):
                results.append(prepared.compile_named())
        except Exception as e:  # noqa: BLE001: reported by the assert below
            errors.append(e)
    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 1200 and set(results) == {expected}


def test_a_call_that_finds_the_buffers_busy_uses_its_own(tree):
    prepared = kjit.prepare(SOURCE, "gemm", **_options(tree))
    expected = prepared.compile_named()
    failing = kjit.prepare(SOURCE, "other", **_options(tree))
    for request in (prepared, failing):
        assert request._lock.acquire(False)  # as another thread in a call would hold it
    try:
        assert prepared.compile_named() == expected and prepared.compile() == expected.cubin_path
        with pytest.raises(kjit.NotFound):
            failing.compile_named()
    finally:
        prepared._lock.release()
        failing._lock.release()


def test_a_prepared_request_loads(tree):
    if not os.environ.get("KJIT_LIBCUDA"):
        pytest.skip("KJIT_LIBCUDA is unset (no driver test double)")
    prepared = kjit.prepare(SOURCE, "gemm", **_options(tree))
    with prepared.compile_and_load() as kernel:
        assert kernel.name == "gemm" and kernel.cubin_path == prepared.compile()


# libkjit's own prepared request (kjit_prepare, 0.14) under kjit.prepare.
def test_kjit_prepare_is_made_libkjits_own_request_with_its_defaults_settled_then(tree, monkeypatch):
    options = _options(tree)
    del options["arch"]
    monkeypatch.setenv("KJIT_ARCH", "sm_90")
    prepared = kjit.prepare(SOURCE, "gemm", **options)
    assert prepared._handle is not None, "kjit.prepare did not use kjit_prepare"
    monkeypatch.setenv("KJIT_ARCH", "sm_80")  # after it was made: does not reach it
    got = prepared.compile_named()
    assert got == kjit.compile_named(SOURCE, "gemm", **_options(tree))  # sm_90's
    assert got != kjit.compile_named(SOURCE, "gemm", **options)  # sm_80's, from the variable now
    assert prepared.compile() == got.cubin_path
    # The plain calls' requests stay the plain path: a variable reaches them at each call.
    assert kjit.Library._request(kjit._lib(), SOURCE, "gemm", _values(options))._handle is None


def test_a_native_request_from_eight_threads_and_in_a_forked_child(tree):
    prepared = kjit.prepare(SOURCE, "gemm", **_options(tree))
    first = prepared.compile_named()
    answers, errors = [], []

    def ask():
        try:
            for _ in range(200):
                answers.append(prepared.compile_named())
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(answers) == 1600 and set(answers) == {first}
    pid = os.fork()
    if pid == 0:  # the child: the parent's request, its entry removed first
        try:
            os.unlink(first.cubin_path)
            again = prepared.compile_named()
            os._exit(0 if again == first and os.path.isfile(again.cubin_path) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert prepared.compile_named() == first


def test_a_native_request_loads_and_is_released_when_dropped(tree):
    prepared = kjit.prepare(SOURCE, "gemm", **_options(tree))
    with prepared.compile_and_load() as kernel:
        assert kernel.name == "gemm" and kernel.cubin_path == prepared.compile()
    handle = prepared._handle
    assert handle is not None
    del prepared  # kjit_prepared_release; the kernel it loaded was released on its own


def test_new_requests_under_one_set_of_options_share_its_encoding(tree):
    lib = kjit._lib()
    sources = [SOURCE + f"// {i}\n" for i in range(5)]
    got = [kjit.compile_named(s, "gemm", **_options(tree)) for s in sources]
    requests = [lib._requests[(s, "gemm", *_values(_options(tree)))] for s in sources]
    assert len({id(r._keep[2]) for r in requests}) == 1  # one kjit_compile_options for the five
    assert len({g.cubin_path for g in got}) == 5  # each source its own entry
    other = lib._request(sources[0], "gemm", _values(_options(tree, nvrtc_options=("-DX=1",))))
    assert other._keep[2] is not requests[0]._keep[2] and other._keep[2].nvrtc_option_count == 1
    assert kjit.compile_named(sources[0], "gemm", **_options(tree, nvrtc_options=("-DX=1",))) != got[0]


def test_requests_that_differ_in_their_name_expression_only_copy_one_encoding(tree):
    # A sweep's requests name a new kernel each: the rest of their options is encoded once, and
    # each request's struct is a copy of it with its own name expression.
    assert kjit._COMPILE_KEYWORDS.index("name_expression") == kjit._prepared._NAME_EXPRESSION_AT
    lib = kjit._lib()
    source = "template <int N> __global__ void scale(float *p) { p[0] = N; }\n"
    got = [kjit.compile_named(source, "scale", name_expression=f"scale<{n}>", **_options(tree)) for n in (1, 2, 3)]
    assert [g.name for g in got] == ["_Z5scaleILi1EEvPf", "_Z5scaleILi2EEvPf", "_Z5scaleILi3EEvPf"]
    structs = [lib._requests[(source, "scale", *_values(_options(tree, name_expression=f"scale<{n}>")))]._keep[2]
               for n in (1, 2, 3)]
    assert [s.name_expression for s in structs] == [b"scale<1>", b"scale<2>", b"scale<3>"]
    base = lib._memo.encoded[_values(_options(tree))][0]
    assert base.name_expression is None
    for s in structs:
        assert s is not base and s.struct_size == base.struct_size and s.arch == b"sm_90"
        assert s.include_path_count == 1 and s.include_paths[0] == str(tree / "include").encode()
        assert s.cache_dir == str(tree / "cache").encode()
    # A name expression the copy cannot take is refused as compile refuses it.
    bad = _options(tree, name_expression="scale<1>\0")
    with pytest.raises(ValueError, match="name_expression contains a NUL"):
        kjit.compile_named(source, "scale", **bad)


# A plain compile_named new to the memo is made the short way (Memo.first_named): the texts
# encoded there, the options through the memo's encodings; what it refuses, compile refuses.
@pytest.mark.parametrize("args, bad", BAD_PYTHON_ARGUMENTS + [((SOURCE, "gemm\0"), {}),
                                                              ((SOURCE + "\udc80", "gemm"), {})])
@pytest.mark.parametrize("seen", [False, True], ids=["options-new", "options-encoded"])
def test_a_first_compile_named_refuses_what_compile_refuses(tree, args, bad, seen):
    lib = kjit.Library(kjit._lib().path)  # a memo of its own: nothing encoded before
    if seen:  # the options encoded by an earlier request: only the texts are checked then
        lib.compile_named(SOURCE, "gemm", **_options(tree))
    for call, compile_call in ((lib.compile_named, lib.compile), (kjit.compile_named, kjit.compile)):
        with pytest.raises((TypeError, ValueError)) as plain:
            compile_call(*args, **_options(tree), **bad)
        with pytest.raises(type(plain.value)) as got:
            call(*args, **_options(tree), **bad)
        assert str(got.value).replace("compile_named()", "compile()") == str(plain.value)


def test_a_new_plain_request_is_made_without_prepare_and_kept_once_answered(tree, monkeypatch):
    lib = kjit.Library(kjit._lib().path)

    def made(*args):
        raise AssertionError("a plain first call went through Memo.prepare")

    monkeypatch.setattr(kjit._prepared.Memo, "prepare", made)
    got = lib.compile_named(SOURCE, "gemm", **_options(tree))
    given = (SOURCE, "gemm", *_values(_options(tree)))
    request = lib._requests[given]
    assert type(request) is kjit.Prepared and request._path is None and request._last[2] is got
    assert request.options == {**kjit._COMPILE_DEFAULTS, **_options(tree)} and got.name == "gemm"
    assert lib.compile_named(SOURCE, "gemm", **_options(tree)) is got  # its repeat: the same answer
    # A name expression new to the memo: its options are a copy of the set's encoding.
    source = "template <int N> __global__ void scale(float *p) { p[0] = N; }\n"
    named = lib.compile_named(source, "scale", name_expression="scale<7>", **_options(tree))
    assert named.name == "_Z5scaleILi7EEvPf"
    # A failing first call raises libkjit's error, keeps nothing and frees the library's buffers.
    kept = len(lib._requests)
    with pytest.raises(kjit.NotFound):
        lib.compile_named(SOURCE, "other", **_options(tree))
    assert len(lib._requests) == kept
    assert lib._shared_out[0].acquire(False)
    lib._shared_out[0].release()


def test_a_plain_call_after_one_with_a_list_shares_its_request(tree):
    # Arguments that are not all plain keep their request under a frozen key; a plain call equal
    # to them then finds that request rather than making a second one.
    lib = kjit.Library(kjit._lib().path)
    first = lib.compile_named(SOURCE, "gemm", **_options(tree, nvrtc_options=["-DX=2"]))
    assert lib.compile_named(SOURCE, "gemm", **_options(tree, nvrtc_options=("-DX=2",))) is first
    assert len({id(request) for request in lib._requests.values()}) == 1
