"""NCP wiring masks: AutoNCP's graph read as binary masks, reproducible from the seed, sparse as
asked, and placeholders of the right shape while saved weights are being loaded."""

from __future__ import annotations

import numpy as np
import pytest
from ncps.wirings import AutoNCP

from nac.wiring import backbone_masks, masks_from_weights, random_mask, sensory_mask


def test_backbone_masks_are_autoncps_graph_layer_by_layer():
    m = backbone_masks(n_in=6, units=20, n_motor=3, sparsity=0.5, seed=1)
    wiring = AutoNCP(20, 3, sparsity_level=0.5, seed=1)
    inter, command, motor = (list(wiring.get_neurons_of_layer(i)) for i in range(3))
    assert m.sensory_inter.shape == (6, len(inter)) and m.inter_command.shape == (len(inter), len(command))
    assert m.command_motor.shape == (len(command), 3)
    wiring.build(6)
    assert np.array_equal(m.inter_command, (wiring.adjacency_matrix[np.ix_(inter, command)] != 0).astype(np.float32))
    for mask in (m.sensory_inter, m.inter_command, m.command_motor):
        assert set(np.unique(mask)) <= {0.0, 1.0} and 0 < mask.mean() < 1  # sparse, never empty
    again = backbone_masks(6, 20, 3, 0.5, seed=1)
    other = backbone_masks(6, 20, 3, 0.5, seed=2)
    assert np.array_equal(again.sensory_inter, m.sensory_inter) and not np.array_equal(other.inter_command, m.inter_command)


def test_sensory_mask_has_the_asked_outputs_and_is_a_fresh_copy():
    for n_out in (4, 7, 16):
        mask = sensory_mask(30, n_out, 0.6, seed=0)
        assert mask.shape == (30, n_out) and 0 < mask.mean() < 1
    a = sensory_mask(30, 7, 0.6, seed=0)
    a[:] = 0  # a caller that changes its copy leaves the cached wiring alone
    assert sensory_mask(30, 7, 0.6, seed=0).any()
    assert sensory_mask(30, 7, 0.2, seed=0).mean() > sensory_mask(30, 7, 0.8, seed=0).mean()  # sparser when asked


def test_random_mask_keeps_about_one_minus_sparsity_and_feeds_every_output():
    mask = random_mask(200, 50, 0.9, seed=3)
    assert mask.mean() == pytest.approx(0.1, abs=0.02) and mask.any(0).all()
    thin = random_mask(2, 40, 0.9, seed=0)  # most outputs would have no input at this size
    assert thin.any(0).all()
    assert np.array_equal(random_mask(20, 5, 0.5, seed=4), random_mask(20, 5, 0.5, seed=4))


def test_while_loading_weights_the_masks_are_placeholders_of_the_same_shapes():
    wired = backbone_masks(6, 20, 3, 0.5, seed=1)
    with masks_from_weights():
        loading = backbone_masks(6, 20, 3, 0.5, seed=1)
        assert sensory_mask(30, 7, 0.6, seed=0).shape == (30, 7) and sensory_mask(30, 7, 0.6, seed=0).all()
    for a, b in zip((wired.sensory_inter, wired.inter_command, wired.command_motor),
                    (loading.sensory_inter, loading.inter_command, loading.command_motor)):
        assert a.shape == b.shape and b.all()
    assert not backbone_masks(6, 20, 3, 0.5, seed=1).sensory_inter.all()  # wired again once loading is over


def test_sparsity_outside_autoncps_range_is_refused():
    for bad in (0.05, 0.95):
        with pytest.raises(ValueError, match="sparsity must be between 0.1 and 0.9"):
            random_mask(4, 4, bad, seed=0)
        with pytest.raises(ValueError, match="sparsity must be between"):
            backbone_masks(4, 12, 2, bad, seed=0)
