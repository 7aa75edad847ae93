"""Augmentations against visual shift: per chunk of steps, on the scene only, on about half the chunks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.training import augment as aug
from agents.training.augment import AUGMENTS, SCENE_ROWS, augment, pink_pictures
from nac.config import ConfigError


def _frames(n=40, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(40, 215, size=(1, 96, 96, 3), dtype=np.uint8)
    frames = np.repeat(base, n, axis=0)  # identical frames: any difference is the augmentation's
    return torch.from_numpy(frames), np.repeat(np.arange(n // 4), 4)  # ten chunks of four frames


@pytest.mark.parametrize("kind", [*(k for k in AUGMENTS if k != "none"), "randmix+overlay"])
def test_an_augmentation_changes_whole_chunks_of_the_scene_and_never_the_strip(kind):
    frames, chunk = _frames()
    out = augment(frames, chunk, kind, np.random.default_rng(3))
    assert out.dtype == torch.uint8 and out.shape == frames.shape
    assert torch.equal(out[:, SCENE_ROWS:], frames[:, SCENE_ROWS:])  # the instruments untouched
    changed = (out != frames).flatten(1).any(1).numpy()
    per_chunk = changed.reshape(10, 4)
    assert (per_chunk.all(1) | ~per_chunk.any(1)).all()  # a chunk is changed whole or not at all
    assert 1 <= per_chunk.all(1).sum() <= 9  # about half of them (SHARE)
    for c in np.flatnonzero(per_chunk.all(1)):  # a chunk's frames changed alike (one draw per chunk)
        assert all(torch.equal(out[4 * c], out[4 * c + k]) for k in range(1, 4))
    assert torch.equal(augment(frames, chunk, kind, np.random.default_rng(3)), out)  # from the generator alone
    assert torch.equal(augment(frames, chunk, "none", np.random.default_rng(3)), frames)


def test_jitter_moves_the_colours_visibly():
    frames, chunk = _frames()
    out = augment(frames, chunk, "jitter", np.random.default_rng(1)).float()
    diff = (out - frames.float())[:, :SCENE_ROWS].abs().mean(dim=(1, 2, 3))
    assert diff.max() > 5  # brightness, contrast, saturation and hue move the colours visibly


def test_randconv_mixes_neighbouring_pixels():
    frames, chunk = _frames()
    frames[:, :SCENE_ROWS] = 0
    frames[:, 40, 40] = 255  # one white pixel: a 3 x 3 convolution spreads it to its neighbours
    out = augment(frames, chunk, "randconv", np.random.default_rng(2))
    picked = (out != frames).flatten(1).any(1)
    spread = (out[picked][:, 39:42, 39:42] > 0).flatten(1).sum(1)
    assert (spread > 1).all() and (out[picked][:, :30, :30] == 0).all()  # spread locally, nothing elsewhere


def test_overlay_pictures_have_a_natural_spectrum_and_blend_half():
    pics = pink_pictures(4, 64, 64, np.random.default_rng(0))
    assert pics.shape == (4, 64, 64, 3) and pics.min() == 0 and pics.max() == 1
    power = np.abs(np.fft.rfft2(pics[..., 0])) ** 2  # (4, 64, 33)
    low, high = power[:, 1:4, 1:4].mean(), power[:, 20:30, 20:30].mean()
    assert low > 20 * high  # 1/f: far more power at low frequencies than white noise's flat spectrum
    frames, chunk = _frames()
    out = augment(frames, chunk, "overlay", np.random.default_rng(4)).float()
    picked = (out != frames.float()).flatten(1).any(1)
    blended = (out[picked][:, :SCENE_ROWS] - 0.5 * frames.float()[picked][:, :SCENE_ROWS]) / 127.5  # the picture, 0..1
    assert blended.min() >= -0.01 and blended.max() <= 1.01


def test_natural_crops_come_from_photographs_that_no_scene_shows():
    from agents.carracing.scenarios import PHOTOS

    assert not set(aug.NATURAL) & set(PHOTOS)  # the photos scenario's pictures never blend into training frames
    a = aug.natural_crops(6, 84, 96, np.random.default_rng(0))
    assert a.shape == (6, 84, 96, 3) and 0 <= a.min() and a.max() <= 1
    assert np.array_equal(a, aug.natural_crops(6, 84, 96, np.random.default_rng(0)))  # drawn by the generator alone
    assert not np.array_equal(a, aug.natural_crops(6, 84, 96, np.random.default_rng(1)))
    assert len({float(c.mean()) for c in a}) == 6  # every crop its own
    assert all(aug.natural_picture(n).dtype == np.uint8 and aug.natural_picture(n).shape[2] == 3 for n in aug.NATURAL)
    frames, chunk = _frames()
    out = augment(frames, chunk, "natural", np.random.default_rng(4)).float()
    picked = (out != frames.float()).flatten(1).any(1)
    blended = (out[picked][:, :SCENE_ROWS] - 0.5 * frames.float()[picked][:, :SCENE_ROWS]) / 127.5  # the crop, 0..1
    assert blended.min() >= -0.01 and blended.max() <= 1.01 and blended.std() > 0.05  # half the frame, half a picture


def test_patch_shows_the_photograph_alone_in_some_regions_and_the_frame_alone_in_others():
    m = aug.patch_masks(8, 84, 96, np.random.default_rng(0))
    assert m.shape == (8, 84, 96, 1) and float(m.min()) == 0 and float(m.max()) == 1
    assert torch.equal(m, aug.patch_masks(8, 84, 96, np.random.default_rng(0)))  # drawn by the generator alone
    full, none = (m == 1).float().mean(), (m == 0).float().mean()
    assert 0.15 < full < 0.6 and 0.15 < none < 0.6  # both kinds of region, each a sizeable share
    assert (m[:, 1:] - m[:, :-1]).abs().max() < 0.5  # smooth: no pixel-to-pixel jumps
    frames, chunk = _frames()
    rng = np.random.default_rng(4)
    out = augment(frames, chunk, "patch", rng, share=1.0).float()
    kept = (out == frames.float()).all(-1)[:, :SCENE_ROWS]  # pixels left as they were
    assert 0.05 < kept.float().mean() < 0.95  # some of the frame left, some covered
    per_frame = kept.flatten(1).float().mean(1)
    assert len(set(per_frame[::4].tolist())) > 1  # each chunk its own mask


def test_invert_turns_the_scene_over_in_about_half_the_chunks_it_is_given():
    frames, chunk = _frames(n=400)  # a hundred chunks of four frames
    out = augment(frames, chunk, "invert", np.random.default_rng(6), share=1.0)
    changed = (out != frames).flatten(1).any(1).numpy()
    assert 0.35 < changed.mean() < 0.65  # INVERT_SHARE of the chunks given (all of them at share 1)
    assert torch.equal(out[changed][:, :SCENE_ROWS], 255 - frames[changed][:, :SCENE_ROWS])  # exactly 1 - x
    assert torch.equal(out[~changed], frames[~changed])


def test_colour_maps_every_pixel_by_one_affine_map_and_stretches_the_frame():
    frames, chunk = _frames()
    frames[:, :SCENE_ROWS] = torch.tensor([102, 204, 102], dtype=torch.uint8)  # grass
    frames[:, 30:50, :SCENE_ROWS] = torch.tensor([102, 102, 102], dtype=torch.uint8)  # a road across it
    out = augment(frames, chunk, "colour", np.random.default_rng(5))
    picked = (out != frames).flatten(1).any(1)
    assert picked.any()
    for f, o in zip(frames[picked], out[picked]):
        scene, got = f[:SCENE_ROWS].reshape(-1, 3), o[:SCENE_ROWS].reshape(-1, 3)
        colours = {tuple(c) for c in got[(scene == torch.tensor([102, 102, 102], dtype=torch.uint8)).all(1)].tolist()}
        assert len(colours) == 1  # one colour in, one colour out: the map never looks at where a pixel is
        assert int(got.min()) == 0 and int(got.max()) == 255  # stretched back to the full range
    a, b = aug.colour_maps(3, np.random.default_rng(0))
    assert a.shape == (3, 3, 3) and b.shape == (3, 3) and (np.abs(b) <= 0.5).all()


def test_kinds_combine_in_their_order():
    frames, chunk = _frames()
    both = augment(frames, chunk, "randmix+overlay", np.random.default_rng(7), share=1.0)
    assert (both != frames).flatten(1).any(1).all()  # share 1: every chunk
    assert not torch.equal(both, augment(frames, chunk, "overlay+randmix", np.random.default_rng(7), share=1.0))
    assert aug.kinds("randmix+overlay") == ["randmix", "overlay"] and aug.kinds("none") == []


@pytest.mark.parametrize("bad", ["mixup", "randconv+mixup", "none+jitter", "jitter+jitter", ""])
def test_a_bad_augmentation_is_refused(bad):
    from agents.training.loop import TrainConfig

    with pytest.raises(ConfigError, match="augment must be one of none, jitter, randconv, randmix, colour, overlay, natural, patch, invert, or several"):
        TrainConfig(data=["x"], out="y", augment=bad)
    with pytest.raises(ConfigError, match="consistency compares a clean and an augmented view: give --augment too"):
        TrainConfig(data=["x"], out="y", consistency=1.0)
