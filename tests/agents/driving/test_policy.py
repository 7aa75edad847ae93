"""The streaming driving policy gives exactly what the network gives on training's windows."""

import numpy as np
import pytest
import torch

from agents.driving.policy import DrivingPolicy, resolve_device
from datasets.demos import DemoSet
from datasets.windows import FrameStore, FrameWindows
from nac import ConfigError
from nac.driving import DrivingNet, DrivingNetConfig


@pytest.mark.parametrize("head", ["nac", "lstm", "cfc", "mha", "ctrnn"])
@pytest.mark.parametrize("stride", [1, 2])
def test_streaming_equals_the_training_windows(head, stride, tiny_demos):
    torch.manual_seed(0)
    net = DrivingNet(DrivingNetConfig(head=head, window=4, frame_stride=stride)).eval()
    episode = DemoSet(tiny_demos).load()[0]
    windows = FrameWindows(FrameStore([episode]), window=4, stride=stride)
    idx, _ = windows.indices(np.arange(30))
    with torch.no_grad():
        expected = net(torch.from_numpy(episode.frames[idx]), torch.from_numpy(episode.timestamps[idx]).float()).softmax(-1)
    policy = DrivingPolicy(net)
    probs = []
    for t in range(30):
        policy.select_action(episode.frames[t])
        probs.append(policy.last["probs"])
        if t in (0, 2, 29):  # the window the head saw is the training window
            feats, times = policy.window()
            with torch.no_grad():
                again = net.decide(feats, times).softmax(-1)[0]
            assert np.allclose(again.numpy(), expected[t].numpy(), atol=1e-4)
            assert np.allclose(times[0].numpy(), episode.timestamps[idx[t]], atol=1e-6)
    assert np.allclose(np.stack(probs), expected.numpy(), atol=1e-4)
    policy.reset()  # a new episode starts from an empty window
    policy.select_action(episode.frames[0])
    assert np.allclose(policy.last["probs"], expected[0].numpy(), atol=1e-4)


def test_argmax_sampling_and_continuous_actions():
    torch.manual_seed(0)
    frame = np.random.default_rng(0).integers(0, 256, (96, 96, 3), dtype=np.uint8)
    greedy = DrivingPolicy(DrivingNet(DrivingNetConfig(head="gru", window=2)))
    a = greedy.select_action(frame)
    assert a == int(np.argmax(greedy.last["probs"]))
    sampler = DrivingPolicy(DrivingNet(DrivingNetConfig(head="gru", window=2)), actions="sample", seed=1)
    draws = set()
    for _ in range(200):
        draws.add(sampler.select_action(frame))
    assert len(draws) > 1  # an untrained softmax is spread over several actions
    cont = DrivingPolicy(DrivingNet(DrivingNetConfig(head="gru", window=2, action_space="continuous")))
    act = cont.select_action(frame)
    assert act.shape == (3,) and -1 <= act[0] <= 1 and 0 <= act[1] <= 1 and 0 <= act[2] <= 1


def test_diffused_actions_pulse_at_the_softmax_rates_without_chance():
    rates = np.array([0.05, 0.1, 0.25, 0.55, 0.05])  # noop, right, left, gas, brake
    net = DrivingNet(DrivingNetConfig(head="gru", window=2))
    with torch.no_grad():  # the same softmax whatever the frame
        net.out.weight.zero_()
        net.out.bias.copy_(torch.log(torch.tensor(rates)))
    frame = np.zeros((96, 96, 3), dtype=np.uint8)
    policy = DrivingPolicy(net, actions="diffuse")
    taken = [policy.select_action(frame) for _ in range(200)]
    counts = np.bincount(taken, minlength=5)
    assert np.all(np.abs(counts - 200 * rates) <= 1)  # every action at its rate, to within one step
    gaps = np.diff(np.flatnonzero(np.array(taken) == 2))
    assert 3 <= gaps.min() and gaps.max() <= 5  # left about every 4th step, never in runs or long droughts
    assert int(np.argmax(rates)) == DrivingPolicy(net).select_action(frame) == 3  # argmax would only ever take gas
    policy.reset()  # a new episode starts with no credit: the same pulses again
    assert [policy.select_action(frame) for _ in range(200)] == taken
    with pytest.raises(ConfigError, match="actions must be one of argmax, sample, diffuse"):
        DrivingPolicy(net, actions="softmax")


def test_devices_resolve_and_a_missing_gpu_is_a_clear_error():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            resolve_device("cuda")
    with pytest.raises(ConfigError, match="unknown device"):
        resolve_device("tpu9")


def test_from_run_says_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        DrivingPolicy.from_run(tmp_path / "nope")
    DrivingNet(DrivingNetConfig(head="gru")).save(tmp_path, "last")
    with pytest.raises(FileNotFoundError, match="best.safetensors"):
        DrivingPolicy.from_run(tmp_path)
    assert DrivingPolicy.from_run(tmp_path, "last").net.config.head == "gru"
