"""The instruction-count benchmark's parsing (`bench.instructions`): its doctests, which
the suite does not collect from `bench/` otherwise, and a group per object file."""

from __future__ import annotations

import doctest

import bench.instructions as instructions


def test_the_doctests_pass() -> None:
    failed, attempted = doctest.testmod(instructions)
    assert attempted >= 5
    assert failed == 0


def test_annotated_lines_are_summed_per_group() -> None:
    annotated = "\n".join(
        [
            "-" * 80,
            "126,832,830 (100.0%)  PROGRAM TOTALS",
            "49,377,563 (38.93%)  ???:LZ4_decompress_safe "
            "[/v/imagecodecs.libs/liblz4-c465.so.1.10.0]",
            "10,417,756 ( 8.21%)  Python/generated_cases.c.h:_PyEval_EvalFrameDefault'2 "
            "[/p/lib/libpython3.13.so.1.0]",
            # Inlined from a header: no object, counted with the interpreter by its path.
            " 1,301,883 ( 1.03%)  /tmp/python-build.2026/Python-3.13.0/./Include/object.h:"
            "_PyEval_EvalFrameDefault'2",
            " 1,530,920 ( 1.21%)  ???:raw_array_assign_array "
            "[/v/numpy/_core/_multiarray_umath.cpython-313-x86_64-linux-gnu.so]",
            " 3,083,388 ( 2.43%)  tls_get_addr.S:__tls_get_addr [/usr/lib/ld-linux-x86-64.so.2]",
            "   100 ( 0.00%)  ???:something [/usr/lib/libffi.so.8]",
            "    20 ( 0.00%)  ./elsewhere/inline.h:other_function",
        ]
    )
    assert instructions.per_object(annotated) == {
        "codecs": 49_377_563,
        "Python": 10_417_756 + 1_301_883,
        "NumPy": 1_530_920,
        "libc": 3_083_388,
        "other": 100 + 20,
    }


def test_the_report_gives_ours_beyond_raw_per_chunk_and_group() -> None:
    def groups(*counts: int) -> dict[str, int]:
        return dict(zip(instructions.GROUPS, counts, strict=True))

    results = {
        "v2 blosc-lz4": {
            "raw": {
                "chunks": 100,
                "groups": groups(74_133_063, 12_446_624, 2_891_420, 5_780_327, 12_699),
            },
            "ours": {
                "chunks": 100,
                "groups": groups(74_225_175, 41_394_762, 2_938_752, 8_171_917, 163_043),
            },
        }
    }
    text = instructions.report(results, ["raw", "ours"])
    assert "| v2 blosc-lz4 | 953k | 1,269k |" in text
    assert "| v2 blosc-lz4 | ours | 316k | 1k | 289k | 0k | 24k | 2k |" in text
