"""Udacity recordings: both CSV forms, paths resolved next to the CSV, bad rows reported, PilotNet
preprocessing and seeded augmentation, splits by session."""

from pathlib import Path

import cv2
import numpy as np
import pytest

from datasets.demos import DataError
from datasets.udacity import UdacityDataset, augment, preprocess, read_log, read_logs, split_by_session

REAL = Path(__file__).parents[1] / "data" / "udacity-real"  # 20 rows of a real Windows recording


def test_a_real_windows_recording_reads_whole():
    rec = read_log(REAL)
    assert len(rec.samples) == 20 and not rec.skipped
    assert all(set(s.images) == {"center", "left", "right"} for s in rec.samples)
    assert rec.samples[0].speed == pytest.approx(7.843922e-05)
    assert len(rec.sessions()) == 1


def _write_set(root: Path, header: bool, absolute: bool, n: int = 6, gap_after: int | None = None) -> Path:
    (root / "IMG").mkdir(parents=True)
    lines = ["center, left, right, steering, throttle, brake, speed"] if header else []
    t = 0
    for i in range(n):
        t += 100 if i != gap_after else 5000
        names = []
        for cam in ("center", "left", "right"):
            name = f"{cam}_2026_01_01_00_00_{t // 1000:02d}_{t % 1000:03d}.jpg"
            img = np.full((160, 320, 3), 40 * i % 255, np.uint8)
            cv2.imwrite(str(root / "IMG" / name), img)
            names.append(f"C:\\Users\\someone\\data\\IMG\\{name}" if absolute else f"IMG/{name}")
        lines.append(", ".join(names + [f"{(i - 3) / 10}", "0.5", "0", f"{i * 3}.5"]))
    (root / "driving_log.csv").write_text("\n".join(lines) + "\n")
    return root


def test_both_csv_forms_read_the_same(tmp_path):
    sim = read_log(_write_set(tmp_path / "sim", header=False, absolute=True))
    sample = read_log(_write_set(tmp_path / "sample", header=True, absolute=False))
    assert len(sim.samples) == len(sample.samples) == 6
    assert [s.steering for s in sim.samples] == [s.steering for s in sample.samples]
    assert sim.samples[2].images["center"] == sample.samples[2].images["center"]


def test_missing_and_broken_images_are_reported_and_skipped(tmp_path):
    root = _write_set(tmp_path / "d", header=False, absolute=True)
    first = sorted((root / "IMG").glob("center_*"))
    first[1].unlink()
    first[2].write_bytes(b"not a jpeg")
    rec = read_log(root)
    assert len(rec.samples) == 4 and len(rec.skipped) == 2
    assert "not found" in rec.skipped[0][2] and "does not decode" in rec.skipped[1][2]
    assert "skipped 2 rows" in rec.report()
    with pytest.raises(DataError, match="not found"):
        read_log(tmp_path / "nowhere")


def test_sessions_split_apart(tmp_path):
    rec = read_log(_write_set(tmp_path / "d", header=False, absolute=True, n=8, gap_after=4))
    assert len(rec.sessions()) == 2
    train, val = split_by_session(rec, 0.5, seed=0)
    sessions = lambda idx: {rec.samples[i].session for i in idx}  # noqa: E731
    assert sessions(train).isdisjoint(sessions(val)) and sorted(train + val) == list(range(8))
    two = read_logs([tmp_path / "d", _write_set(tmp_path / "e", header=True, absolute=False)])
    assert len(two.sessions()) == 3


def test_preprocessing_and_seeded_augmentation(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 255, (160, 320, 3), dtype=np.uint8)
    assert preprocess(rgb).shape == (66, 200, 3)
    a, sa = augment(rgb, 0.1, np.random.default_rng(5))
    b, sb = augment(rgb, 0.1, np.random.default_rng(5))
    c, _ = augment(rgb, 0.1, np.random.default_rng(6))
    assert np.array_equal(a, b) and sa == sb and not np.array_equal(a, c)
    rec = read_log(_write_set(tmp_path / "d", header=False, absolute=True))
    ds = UdacityDataset(rec, range(6), train=True, seed=3)
    x1, x2 = ds[2], ds[2]
    assert x1["image"].shape == (3, 66, 200) and np.array_equal(x1["image"], x2["image"])
    val = UdacityDataset(rec, range(6), train=False)
    assert val[2]["steering"].item() == pytest.approx(rec.samples[2].steering)
