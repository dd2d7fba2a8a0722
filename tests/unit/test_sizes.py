"""Message sizes as nccl-tests spells them, and the training probe's sizes."""

from __future__ import annotations

import pytest

from dtrun.workloads.sizes import format_size, message_sizes, parse_size


def test_sizes_are_powers_of_1024():
    assert parse_size("4K") == 4096
    assert parse_size("64m") == 64 * 1024**2
    assert parse_size("1G") == 1024**3
    assert parse_size("8GB") == 8 * 1024**3
    assert parse_size("1000") == 1000


def test_a_range_doubles_like_nccl_tests_minus_f_2():
    assert message_sizes("4K:64K") == [4096, 8192, 16384, 32768, 65536]
    assert message_sizes("1M:1M") == [1024**2]


def test_a_list_is_sorted_without_repeats():
    assert message_sizes("16M, 1M,1M") == [1024**2, 16 * 1024**2]


@pytest.mark.parametrize(
    "bad", ["", "4X", "0:4K", "64K:4K", "-1", ",", "257G", "4K:99999999999999G", "1M,300G"]
)
def test_bad_sizes_are_refused(bad):
    with pytest.raises(ValueError):
        message_sizes(bad)


def test_the_largest_size_is_256g_and_more_says_why():
    assert message_sizes("128G:256G") == [128 * 1024**3, 256 * 1024**3]
    with pytest.raises(ValueError, match="'257G' is more than 256G: no accelerator holds"):
        message_sizes("4K:257G")


def test_formatting_gives_the_shortest_exact_spelling():
    assert [format_size(s) for s in (4096, 3 * 1024**2, 1024**3, 1000)] == [
        "4K",
        "3M",
        "1G",
        "1000",
    ]


def test_the_probe_doubles_up_to_the_gradient_and_ends_on_it():
    from dtrun.workloads.sizes import probe_sizes

    assert probe_sizes(2_144_256, "cpu") == [4096 * 2**k for k in range(9)] + [
        2_144_256
    ]  # 4K..1M, then the gradient's own 2.1 MB
    assert probe_sizes(100, "cpu") == [4096]  # never below 4K
    assert probe_sizes(10 * 1024**3, "cpu")[-1] == 64 * 1024**2  # capped on CPU
    assert probe_sizes(10 * 1024**3, "cuda")[-1] == 1024**3  # and on GPUs
