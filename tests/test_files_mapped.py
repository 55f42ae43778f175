"""gnndist.files.drop_mapped: a mapped array's resident pages go (and come back intact); anything else is kept."""

import sys

import numpy as np
import pytest
import torch

from gnndist.files import drop_mapped

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps and madvise: Linux")


def rss_file_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1])


def test_a_mapped_arrays_pages_go_and_read_back_the_same(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(4_000_000, dtype=np.int64))  # 32 MB
    t = torch.from_numpy(np.load(tmp_path / "a.npy", mmap_mode="r"))
    total = int(t.sum())
    touched = rss_file_kib()
    assert drop_mapped(t.data_ptr(), t.numel() * t.element_size())
    assert touched - rss_file_kib() > 25_000  # most of the 31,250 KiB left this process
    assert int(t.sum()) == total  # read again from the file


def test_anonymous_and_unknown_memory_is_left_alone():
    t = torch.arange(1_000_000)
    assert not drop_mapped(t.data_ptr(), t.numel() * t.element_size())
    assert int(t[-1]) == 999_999 and int(t.sum()) == 999_999 * 1_000_000 // 2
    assert not drop_mapped(8, 16)  # no mapping there
