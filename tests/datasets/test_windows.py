"""Windows of frames for training, and splits by episode."""

import dataclasses

import numpy as np
import pytest

from datasets.demos import DataError, Episode
from datasets.windows import FrameStore, FrameWindows, kfold_by_episode, split_by_episode


def _episode(seed: int, n: int) -> Episode:
    frames = np.zeros((n, 4, 4, 3), np.uint8)
    frames[:, 0, 0, 0] = np.arange(n)  # frame t carries its own index
    return Episode(seed, frames, np.arange(n) % 5, np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool),
                   np.arange(n) / 50.0, np.zeros((n, 6), np.float32))


def test_windows_end_at_the_labelled_frame_and_never_cross_episodes():
    store = FrameStore([_episode(0, 10), _episode(1, 12)])
    ds = FrameWindows(store, window=4, stride=2)
    assert len(ds) == 22
    item = ds[15]  # episode 1, step 5: steps 5, 3, 1 and (before the start) padding
    assert item["frames"][:, 0, 0, 0].tolist() == [0, 1, 3, 5]
    assert item["valid"].tolist() == [False, True, True, True]
    assert item["action"].item() == 5 % 5
    first = ds[10]  # episode 1, step 0: everything before is padding with the first frame
    assert first["frames"][:, 0, 0, 0].tolist() == [0, 0, 0, 0]
    assert first["valid"].tolist() == [False, False, False, True]
    assert np.allclose(ds[3]["timestamps"].numpy(), np.array([0, 0, 1, 3]) / 50.0)


def test_a_store_read_one_episode_at_a_time_is_the_store_of_the_list():
    eps = [_episode(0, 10), _episode(1, 12)]
    eps[1].state[:, 0] = 7.0
    whole, streamed = FrameStore(eps), FrameStore(iter(eps), [10, 12])
    for name in ("frames", "actions", "timestamps", "state", "starts", "lengths", "episode_of"):
        assert np.array_equal(getattr(whole, name), getattr(streamed, name)), name
    assert streamed.seeds == [0, 1] and streamed.frames.dtype == np.uint8
    with pytest.raises(DataError, match="episode 1 has 12 steps where its manifest says 11"):
        FrameStore(iter(eps), [10, 11])
    with pytest.raises(DataError, match="1 episodes came where 2 were announced"):
        FrameStore(iter(eps[:1]), [10, 12])


def test_a_window_longer_than_an_episode_is_refused():
    store = FrameStore([_episode(0, 30), _episode(1, 5)])
    with pytest.raises(DataError, match="longer than episode 1 \\(5 steps\\)"):
        FrameWindows(store, window=4, stride=2)


def test_splits_keep_episodes_on_one_side():
    seeds = list(range(10))
    train, val = split_by_episode(seeds, 0.2, seed=1)
    assert len(val) == 2 and not set(train) & set(val) and sorted(train + val) == seeds
    folds = kfold_by_episode(seeds, 5)
    assert sorted(s for _, v in folds for s in v) == seeds
    assert all(not set(t) & set(v) for t, v in folds)
    with pytest.raises(DataError, match="--folds must be between 2"):
        kfold_by_episode(seeds, 11)


def test_jittered_windows_keep_a_regular_share():
    from datasets.windows import jittered_back

    rng = np.random.default_rng(0)
    mixed = jittered_back(4000, 8, 3, rng, regular_share=0.4)
    regular = (np.diff(mixed[:, ::-1], axis=1) == 1).all(axis=1)  # every gap 1
    # all-regular by chance under 1..3 gaps is (1/3)^7 = 0.05 %: the share is the one asked for
    assert 0.36 < regular.mean() < 0.44
    assert set(np.unique(np.diff(mixed[~regular][:, ::-1], axis=1))) == {1, 2, 3}
    plain = jittered_back(4000, 8, 3, np.random.default_rng(0))
    assert (np.diff(plain[:, ::-1], axis=1) == 1).all(axis=1).mean() < 0.01


def test_action_rates_are_each_actions_share_around_a_step_within_its_episode():
    a = Episode(0, np.zeros((6, 4, 4, 3), np.uint8), np.array([3, 2, 3, 3, 2, 3]), np.zeros(6, np.float32), np.zeros(6, bool),
                np.zeros(6, bool), np.arange(6) / 50.0, np.zeros((6, 6), np.float32))
    b = _episode(1, 3)  # actions 0, 1, 2: its rates never see episode a's
    rates = FrameStore([a, b]).action_rates(1, 5)
    assert rates.shape == (9, 5) and np.allclose(rates.sum(1), 1)
    assert np.allclose(rates[0], [0, 0, 0.5, 0.5, 0])  # steps 0..1 (the episode starts)
    assert np.allclose(rates[1], [0, 0, 1 / 3, 2 / 3, 0])  # steps 0..2
    assert np.allclose(rates[4], [0, 0, 1 / 3, 2 / 3, 0])  # steps 3..5
    assert np.allclose(rates[6], [0.5, 0.5, 0, 0, 0]) and np.allclose(rates[8], [0, 0.5, 0.5, 0, 0])
    assert np.allclose(FrameStore([a]).action_rates(0, 5), np.eye(5)[a.actions])  # K = 0: the actions themselves
    with pytest.raises(DataError, match="discrete actions"):
        FrameStore([dataclasses.replace(a, actions=np.zeros((6, 3), np.float32))]).action_rates(1, 5)


def test_arrival_windows_are_the_frames_the_policy_saw_with_their_real_gaps():
    from datasets.windows import arrival_back

    seen = _episode(0, 12)  # a rollout in which the policy saw steps 0, 1, 3, 6, 7, 10
    saw = np.zeros(12, np.float32)
    saw[[0, 1, 3, 6, 7, 10]] = 1
    seen = dataclasses.replace(seen, state=np.column_stack([seen.state, saw]))
    clean = dataclasses.replace(_episode(1, 8), state=np.column_stack([np.zeros((8, 6), np.float32), np.ones(8, np.float32)]))
    demo = dataclasses.replace(_episode(2, 8), state=np.column_stack([np.zeros((8, 6), np.float32), np.full(8, np.nan, np.float32)]))
    old = _episode(3, 8)  # recorded before the column: 6 columns, NaN-padded by the store
    store = FrameStore([seen, clean, demo, old])
    back, has = arrival_back(store, 6, window=4)
    assert has.tolist()[:12] == saw.astype(bool).tolist() and not has[12:].any()  # only where the policy decided, in a rollout that missed frames
    ds = FrameWindows(store, window=4)
    idx, valid = ds.indices(np.array([10, 6, 1]), back[[10, 6, 1]])
    assert store.frames[idx][:, :, 0, 0, 0].tolist() == [[3, 6, 7, 10], [0, 1, 3, 6], [0, 0, 0, 1]]
    assert valid.tolist()[2] == [False, False, True, True]  # before the first frame the first is repeated, as the policy does
    assert np.allclose(store.timestamps[idx[0]], np.array([3, 6, 7, 10]) / 50.0)  # the gaps the frames came at
    assert (back[~has] == [3, 2, 1, 0]).all()  # elsewhere: the regular window
