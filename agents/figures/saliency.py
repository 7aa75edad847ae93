"""Where a driving policy looks: a Grad-CAM map of its chosen action over the latest frame
(captum's LayerGradCam through the CNN's last convolution), for videos and figures."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from agents.driving.policy import DrivingPolicy


def saliency(policy: DrivingPolicy, frame: np.ndarray, action: Any) -> np.ndarray:
    """(96, 96) Grad-CAM map in [0, 1] of the chosen output w.r.t. the latest frame.

    Only the latest frame's features are differentiated; the rest of the window is what the
    head saw. Continuous policies explain the steering magnitude, wheel-angle policies the
    angle's (the sign picks the direction).
    """
    from captum.attr import LayerAttribution, LayerGradCam  # captum, not a hand-written Grad-CAM

    net = policy.net
    feats, times = policy.window()
    conv = [m for m in net.cnn if isinstance(m, torch.nn.Conv2d)][-1]
    x = torch.as_tensor(np.ascontiguousarray(frame), device=policy.device).permute(2, 0, 1)[None].float() / 255.0

    steering = policy.continuous or net.config.wheel_target  # the first output steers; else one logit per action

    def forward(img: torch.Tensor) -> torch.Tensor:
        window = torch.cat([feats[:, :-1].expand(img.shape[0], -1, -1), net.pixel_features(img)[:, None]], 1)
        raw = net.decide(window, times.expand(img.shape[0], -1))
        if steering:
            return raw[:, :1] * torch.sign(raw[:, :1].detach())
        return raw

    target = 0 if steering else int(action)
    with torch.enable_grad():
        attr = LayerGradCam(forward, conv).attribute(x, target=target, relu_attributions=True)
    heat = LayerAttribution.interpolate(attr, (96, 96), interpolate_mode="bilinear")[0, 0].detach().cpu().numpy()
    top = heat.max()
    return heat / top if top > 0 else heat
