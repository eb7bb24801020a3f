"""Ground-truth files written in their own formats for the localisation tests: Chefer et al.'s gtsegs_ijcv.mat
(MATLAB v7.3 = HDF5 with object references, built with h5py)."""

from __future__ import annotations

import pytest


def write_segmentation_mat(path, images, masks):
    """gtsegs_ijcv.mat's layout: /value/img[i, 0] -> [3, W, H] uint8, /value/gt[i, 0] -> a cell -> [W, H] mask."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as f:
        img = f.create_dataset("value/img", (len(images), 1), dtype=h5py.ref_dtype)
        gt = f.create_dataset("value/gt", (len(images), 1), dtype=h5py.ref_dtype)
        for i, (im, m) in enumerate(zip(images, masks)):
            img[i, 0] = f.create_dataset(f"#refs#/img{i}", data=im.transpose(2, 1, 0)).ref
            cell = f.create_dataset(f"#refs#/cell{i}", (1, 1), dtype=h5py.ref_dtype)
            cell[0, 0] = f.create_dataset(f"#refs#/gt{i}", data=m.transpose(1, 0)).ref
            gt[i, 0] = cell.ref
