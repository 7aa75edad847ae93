"""The CarRacing driving network: shapes, windows that share frames, persistence."""

import numpy as np
import pytest
import torch

from nac import ConfigError
from nac.driving import DrivingNet, DrivingNetConfig, Dropout, cnn_features

HEADS = ["nac", "lstm", "cfc", "mha", "mha-rope"]


def test_the_cnn_is_the_papers():
    net = DrivingNet(DrivingNetConfig(head="gru"))
    convs = [m for m in net.cnn if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [(3, 10, 3, 2), (10, 20, 5, 2), (20, 30, 5, 2)]
    assert cnn_features(96) == 30 * 9 * 9
    assert net.mlp[0].out_features == 64


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("space, outputs", [("discrete", 5), ("continuous", 3)])
def test_outputs_and_windows_that_share_frames(head, space, outputs):
    torch.manual_seed(0)
    net = DrivingNet(DrivingNetConfig(head=head, action_space=space, window=4)).eval()
    frames = torch.randint(0, 256, (10, 96, 96, 3), dtype=torch.uint8)
    index = torch.tensor([[0, 1, 2, 3], [2, 3, 4, 5], [6, 7, 8, 9]])
    ts = index.float() / 50
    with torch.no_grad():
        shared = net(frames, ts, index=index)
        separate = net(frames[index], ts)
        streamed_features = net.decide(net.encode(frames)[index], ts)  # the CNN's features, as closed loop keeps them
    assert shared.shape == (3, outputs)
    assert torch.allclose(shared, separate, atol=1e-5)
    assert torch.allclose(shared, streamed_features, atol=1e-5)
    if space == "continuous":
        a = net.squash(shared)
        assert (a[:, 0].abs() <= 1).all() and ((a[:, 1:] >= 0) & (a[:, 1:] <= 1)).all()


def test_time_reaches_only_heads_that_take_it():
    frames = torch.randint(0, 256, (2, 4, 96, 96, 3), dtype=torch.uint8)
    ts = torch.tensor([[0.0, 0.02, 0.04, 0.06], [0.0, 0.1, 0.3, 0.6]])
    for head, uses in [("nac", True), ("cfc", True), ("lstm", False)]:
        torch.manual_seed(0)
        net = DrivingNet(DrivingNetConfig(head=head, window=4)).eval()
        with torch.no_grad():
            moved = not torch.allclose(net(frames, ts), net(frames, ts * 3), atol=1e-6)
        assert moved == uses, head
        off = DrivingNet(DrivingNetConfig(head=head, window=4, use_time=False)).eval()
        assert off.head_time(ts) is None


def test_save_and_load_rebuild_the_same_network(tmp_path):
    net = DrivingNet(DrivingNetConfig(head="nac", window=3, frame_stride=2, nac={"topk": 2, "mode": "euler"})).eval()
    net.save(tmp_path, "best")
    again = DrivingNet.load(tmp_path, "best").eval()
    assert again.config == net.config
    frames = torch.randint(0, 256, (1, 3, 96, 96, 3), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.equal(net(frames), again(frames))


def test_loading_takes_the_wiring_masks_from_the_weights_without_wiring_again(tmp_path, monkeypatch):
    from ncps.wirings import AutoNCP

    from nac import wiring

    net = DrivingNet(DrivingNetConfig(head="nac", window=3, nac={"seed": 5})).eval()
    masks = {k: v for k, v in net.state_dict().items() if k.endswith("mask")}
    assert any(0 < float(m.mean()) < 1 for m in masks.values())  # sparse: not the loading placeholders
    net.save(tmp_path, "best")

    def no_wiring(self, input_shape):
        raise AssertionError("AutoNCP wired a network that was loaded")

    monkeypatch.setattr(AutoNCP, "build", no_wiring)
    again = DrivingNet.load(tmp_path, "best")
    assert all(torch.equal(again.state_dict()[k], m) for k, m in masks.items())
    monkeypatch.undo()
    assert not wiring.sensory_mask(40, 8, 0.5, 3).all()  # building from a config wires again afterwards
    # within a process a wiring is built once; each network gets its own copy of the mask
    a, b = wiring.sensory_mask(40, 8, 0.5, 3), wiring.sensory_mask(40, 8, 0.5, 3)
    assert np.array_equal(a, b) and a is not b


def test_a_checkpoint_that_does_not_match_its_config_is_refused(tmp_path):
    DrivingNet(DrivingNetConfig(head="lstm")).save(tmp_path, "best")
    cfg = (tmp_path / "config.json").read_text().replace('"lstm"', '"gru"')
    (tmp_path / "config.json").write_text(cfg)
    with pytest.raises(ConfigError, match="do not match its config.json"):
        DrivingNet.load(tmp_path, "best")
    (tmp_path / "config.json").write_text(cfg.replace('"carracing"', '"udacity"'))
    with pytest.raises(ConfigError, match="not a CarRacing driving run"):
        DrivingNet.load(tmp_path, "best")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"head": "transformer"}, "unknown head 'transformer'"),
        ({"action_space": "joystick"}, "action_space must be one of discrete, continuous"),
        ({"window": 0}, r"window must be a whole number in 1\.\."),
        ({"nac": {"topk": 0}}, "topk must be >= 1"),
        ({"num_heads": 5}, "divisible"),
        ({"contrast_flip": 0.5}, "contrast_flip turns the contrast over"),
        ({"frame_input": "contrast", "contrast_flip": 1.0}, "contrast-flip must be a number in"),
        ({"contrast_from": "ahead"}, "contrast_from is the colour a contrast input is measured from"),
        ({"frame_input": "contrast", "contrast_jitter": 0.5}, "contrast_jitter moves the patch the contrast is measured from"),
        ({"frame_input": "contrast", "contrast_from": "ahead", "contrast_jitter": 1.0}, "contrast-jitter must be a number in"),
        ({"frame_input": "contrast", "contrast_from": "car"}, "contrast_from must be one of scene, ahead"),
        ({"frame_input": "hsv"}, "frame_input must be one of rgb, contrast, contrast-scaled, rgb\\+contrast, rgb\\+contrast-scaled"),
    ],
)
def test_bad_network_configs_say_what_is_allowed(options, message):
    with pytest.raises(ConfigError, match=message):
        DrivingNetConfig(**options)


def test_dropout_drops_a_fifth_scales_the_rest_and_follows_torchs_seed():
    d = Dropout(0.2)
    x = torch.rand(400, 50, 50) + 0.5
    d.eval()
    assert torch.equal(d(x), x)
    d.train()
    torch.manual_seed(3)
    y = d(x)
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - 0.2) < 0.002  # 1 M elements: the share dropped is p, to 0.2 %
    assert torch.allclose(y[kept], x[kept] * (65536 / (65536 - 13107)))  # the rest scaled so that E[y] = x
    torch.manual_seed(3)
    assert torch.equal(d(x), y)  # torch.manual_seed decides the mask, as for nn.Dropout
    assert not torch.equal(d(x), y)
    xg = x.clone().requires_grad_(True)
    torch.manual_seed(3)
    d(xg).sum().backward()
    assert torch.allclose(xg.grad, kept.float() * (65536 / (65536 - 13107)))
    assert torch.equal(Dropout(0.0).train()(x), x)


def _striped(road: tuple[int, int, int], grass: tuple[int, int, int]) -> torch.Tensor:
    """(1, 96, 96, 3) uint8: a vertical road 20 pixels wide on grass."""
    frame = torch.tensor(grass, dtype=torch.uint8).expand(1, 96, 96, 3).clone()
    frame[:, :, 40:60] = torch.tensor(road, dtype=torch.uint8)
    return frame


def test_the_contrast_input_shows_a_road_lighter_or_darker_than_its_grass_alike():
    net = DrivingNet(DrivingNetConfig(frame_input="contrast")).eval()
    x = lambda frame: frame.permute(0, 3, 1, 2).float() / 255
    dark = net.see(x(_striped((102, 102, 102), (102, 204, 102))))  # the clean scene's colours
    light = net.see(x(_striped((102, 255, 102), (102, 153, 102))))  # the road 51 levels lighter, as far from its grass
    assert dark.shape == (1, 3, 96, 96)
    assert torch.allclose(dark[..., :84, :], light[..., :84, :], atol=1e-3)
    assert dark[0, :, :84, 45].min() > 0.22 and dark[0, :, :84, 10].max() < 1e-3  # the road stands out, the grass is 0
    assert dark[0, :, 84:].equal(x(_striped((102, 102, 102), (102, 204, 102)))[0, :, 84:])  # the instruments as they are
    swapped = net.see(x(_striped((102, 102, 102), (204, 102, 102))))  # the grass red instead of green
    assert torch.allclose(dark[..., :84, :], swapped[..., :84, :], atol=1e-3)
    frames = _striped((102, 102, 102), (102, 204, 102)).expand(2, 8, 96, 96, 3)
    assert net(frames).shape == (2, 5)
    both = DrivingNet(DrivingNetConfig(frame_input="rgb+contrast")).eval()
    seen = both.see(x(_striped((102, 102, 102), (102, 204, 102))))
    assert seen.shape == (1, 4, 96, 96) and seen[:, :3].equal(x(_striped((102, 102, 102), (102, 204, 102))))
    assert seen[:, 3:, :84].equal(dark[:, :1, :84]) and not seen[:, 3, 84:].any()
    assert both(frames).shape == (2, 5)
    scaled = DrivingNet(DrivingNetConfig(frame_input="contrast-scaled")).eval()
    faint = scaled.see(x(_striped((102, 153, 102), (102, 204, 102))))  # the road half as far from its grass
    assert torch.allclose(scaled.see(x(_striped((102, 102, 102), (102, 204, 102))))[..., :84, :], faint[..., :84, :], atol=5e-3)
    both_scaled = DrivingNet(DrivingNetConfig(frame_input="rgb+contrast-scaled")).eval()
    seen = both_scaled.see(x(_striped((102, 153, 102), (102, 204, 102))))
    assert seen.shape == (1, 4, 96, 96) and torch.allclose(seen[:, 3:, :84], faint[:, :1, :84])
    rgb = DrivingNet(DrivingNetConfig())
    assert rgb.see(x(_striped((1, 2, 3), (4, 5, 6)))).equal(x(_striped((1, 2, 3), (4, 5, 6))))


def test_the_contrast_from_ahead_shows_the_road_dark_whatever_its_background():
    net = DrivingNet(DrivingNetConfig(frame_input="rgb+contrast", contrast_from="ahead")).eval()
    x = lambda frame: frame.permute(0, 3, 1, 2).float() / 255
    plain = net.see(x(_striped((102, 102, 102), (102, 204, 102))))[0, 3]  # the car in front of columns 44..51: on the road
    assert plain[:84, 40:60].max() < 1e-3 and plain[:84, :40].min() > 0.2  # the road 0, the grass far from it
    assert not plain[84:].any()  # the strip's contrast channel stays 0
    noisy = _striped((102, 102, 102), (0, 0, 0))
    noisy[:, :, :40] = torch.randint(0, 256, (1, 96, 40, 3), generator=torch.Generator().manual_seed(0))
    seen = net.see(x(noisy))[0, 3]
    assert seen[:84, 40:60].max() < 1e-3 and seen[:84, :40].mean() > 0.2  # noise instead of grass: the road still 0
    scene = DrivingNet(DrivingNetConfig(frame_input="rgb+contrast")).eval().see(x(noisy))[0, 3]
    assert scene[:84, 40:60].min() > 0.05  # measured from the scene's median instead, the road is not
    elsewhere = _striped((102, 102, 102), (102, 204, 102))
    elsewhere[:, :, 40:60] = torch.tensor((102, 204, 102), dtype=torch.uint8)  # the car on the grass: the grass is 0 now
    elsewhere[:, :, 10:30] = torch.tensor((102, 102, 102), dtype=torch.uint8)
    seen = net.see(x(elsewhere))[0, 3]
    assert seen[:84, 40:60].max() < 1e-3 and seen[:84, 10:30].min() > 0.2


def test_contrast_flip_turns_over_that_share_of_frames_in_training_only():
    net = DrivingNet(DrivingNetConfig(frame_input="rgb+contrast", contrast_flip=0.5))
    frames = (torch.tensor([102, 204, 102]) / 255).expand(400, 96, 96, 3).clone()
    frames[:, :, 40:60] = 0.4  # the road
    x = frames.permute(0, 3, 1, 2)
    plain = net.eval().see(x)[:, 3]
    torch.manual_seed(0)
    seen = net.train().see(x)[:, 3]
    flipped = (seen[:, :84] - (1 - plain[:, :84])).abs().amax(dim=(1, 2)) < 1e-6
    kept = (seen - plain).abs().amax(dim=(1, 2)) < 1e-6
    assert (flipped ^ kept).all() and 160 < int(flipped.sum()) < 240  # each frame one or the other, about half flipped
    assert not seen[:, 84:].any()  # the strip's contrast channel stays 0
    torch.manual_seed(0)
    assert net.see(x)[:, 3].equal(seen)  # torch's seed decides, as for dropout


def test_contrast_jitter_measures_that_share_of_frames_from_a_random_patch_in_training_only():
    """The road (columns 40..59) under the car, grass either side: from the patch ahead the road is 0; from a patch moved
    onto the grass, the grass is 0 and the road is not. Evaluation never moves it; torch's seed decides which frames."""
    net = DrivingNet(DrivingNetConfig(frame_input="rgb+contrast", contrast_from="ahead", contrast_jitter=0.5))
    frames = _striped((102, 102, 102), (102, 204, 102)).expand(400, -1, -1, -1)
    x = frames.permute(0, 3, 1, 2).float() / 255
    assert net.eval().see(x)[:, 3, :84, 40:60].amax() < 1e-3  # every frame from the patch ahead
    torch.manual_seed(0)
    seen = net.train().see(x)[:, 3]
    road_zero = seen[:, :84, 40:60].amax(dim=(1, 2)) < 1e-3
    grass_zero = seen[:, :84, :40].amax(dim=(1, 2)) < 1e-3
    # a moved patch lands on the road (about 20 of 96 columns, and the patch's width) or on the grass; a frame whose
    # patch landed on the grass sees the contrast turned over, as a car at the road's edge does
    assert (road_zero ^ grass_zero).all() and 100 < int(grass_zero.sum()) < 200
    assert not seen[:, 84:].any()  # the strip's contrast channel stays 0
    torch.manual_seed(0)
    assert net.see(x)[:, 3].equal(seen)
