"""Every Triton kernel compiles for sm_90 through Triton's real compiler, on a machine without a GPU.

The other kernel tests run Triton's interpreter on CPU, which never lowers a kernel; this
catches what only the compiler rejects (a non-constexpr global read in a kernel was one
such bug: it passed every CPU test and failed on the first H200).
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")
pytestmark = pytest.mark.triton


def _python(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, do not interpret
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)


def test_every_kernel_compiles_for_sm90_without_spills():
    res = _python("from gnndist.kernels.compile_check import main; raise SystemExit(main(['--quick']))")
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    assert res.returncode == 0 and lines and all(ln.startswith("ok") for ln in lines), res.stdout + res.stderr[-2000:]
    assert len(lines) >= 20
    assert any("spmm tune" in ln for ln in lines)  # the options measured tiles may choose compile too
    for ln in lines:  # no default tile spills registers to local memory (when cuobjdump can tell)
        assert "spmm tune" in ln or "local bytes None" in ln or "local bytes 0" in ln, ln


def test_the_check_catches_a_compile_only_error(tmp_path):
    (tmp_path / "bad_kernel.py").write_text(textwrap.dedent('''
        import triton
        import triton.language as tl

        SCALE = 3  # read inside a kernel, but not a constexpr: the interpreter accepts it, the compiler does not

        @triton.jit
        def bad(X, n, BLOCK: tl.constexpr):
            i = tl.arange(0, BLOCK)
            tl.store(X + i, tl.load(X + i, mask=i < n) * SCALE, mask=i < n)
    '''))
    res = _python(textwrap.dedent(f'''
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from bad_kernel import bad
        from gnndist.kernels.compile_check import Case, compile_case
        try:
            compile_case(Case("bad", bad, {{"X": "*fp32", "n": "i32"}}, {{"BLOCK": 16}}), 90)
        except Exception as e:
            print("rejected:", type(e).__name__)
    '''))
    assert "rejected:" in res.stdout, res.stdout + res.stderr[-2000:]
