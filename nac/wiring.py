"""NCP wiring masks for NAC's sparse projections.

The graph comes from `ncps.wirings.AutoNCP` (the field's own library, as in `ncps`: wiring is
separate from the cells that use it). This module only reads its adjacency matrices and turns
them into binary numpy masks; the layers keep those masks as buffers.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from ncps.wirings import AutoNCP

MIN_SPARSITY, MAX_SPARSITY = 0.1, 0.9  # the range AutoNCP accepts (it rejects < 0.1)
_LOADING = False  # see masks_from_weights


@contextmanager
def masks_from_weights() -> Iterator[None]:
    """While a network is built only to receive saved weights (whose state holds every mask as a
    buffer), the NCP masks are placeholders of the right shape: AutoNCP wires a 2430-input
    sensory layer one synapse at a time in Python, 2-6 s for NAC's three projections, paid by
    every process that loads a policy (evaluation workers, videos, the bridge). The caller must
    load a state that includes the masks (nac.checkpoint.build_loaded does, strictly)."""
    global _LOADING
    before, _LOADING = _LOADING, True
    try:
        yield
    finally:
        _LOADING = before


@dataclass(frozen=True)
class BackboneMasks:
    """Binary masks of an NCP's feed-forward path: sensory -> inter -> command -> motor."""

    sensory_inter: np.ndarray  # (n_in, n_inter)
    inter_command: np.ndarray  # (n_inter, n_command)
    command_motor: np.ndarray  # (n_command, n_motor)


def _check_sparsity(sparsity: float) -> None:
    if not MIN_SPARSITY <= sparsity <= MAX_SPARSITY:
        raise ValueError(
            f"sparsity must be between {MIN_SPARSITY} and {MAX_SPARSITY} for NCP wiring "
            f"(got {sparsity}); use dense gates for a fully connected layer"
        )


def _layers(wiring: AutoNCP) -> tuple[list[int], list[int], list[int]]:
    # ncps numbers neurons motor first, then command, then inter; layer 0 is inter.
    return (
        list(wiring.get_neurons_of_layer(0)),
        list(wiring.get_neurons_of_layer(1)),
        list(wiring.get_neurons_of_layer(2)),
    )


def backbone_masks(n_in: int, units: int, n_motor: int, sparsity: float, seed: int) -> BackboneMasks:
    """Masks of an `AutoNCP(units, n_motor)` wiring fed by `n_in` sensory inputs."""
    _check_sparsity(sparsity)
    wiring = AutoNCP(units, n_motor, sparsity_level=sparsity, seed=seed)
    inter, command, motor = _layers(wiring)
    if _LOADING:  # the layer sizes are known before wiring
        sizes = (n_in, len(inter), len(command), len(motor))
        return BackboneMasks(*(np.ones(shape, np.float32) for shape in zip(sizes, sizes[1:])))
    wiring.build(n_in)
    adj = wiring.adjacency_matrix != 0  # (units, units), polarity dropped: we learn signed weights
    sens = wiring.sensory_adjacency_matrix != 0  # (n_in, units)
    return BackboneMasks(
        sensory_inter=sens[:, inter].astype(np.float32),
        inter_command=adj[np.ix_(inter, command)].astype(np.float32),
        command_motor=adj[np.ix_(command, motor)].astype(np.float32),
    )


def sensory_mask(n_in: int, n_out: int, sparsity: float, seed: int) -> np.ndarray:
    """(n_in, n_out) mask of the sensory -> inter synapses of an AutoNCP with n_out inter neurons
    (a fresh copy; the wiring is built once per process and arguments)."""
    _check_sparsity(sparsity)
    if _LOADING:
        return np.ones((n_in, n_out), np.float32)
    return _sensory_mask(n_in, n_out, sparsity, seed).copy()


@functools.lru_cache(maxsize=32)
def _sensory_mask(n_in: int, n_out: int, sparsity: float, seed: int) -> np.ndarray:
    """AutoNCP is parameterised by its total unit count, not by its inter-neuron count; with one
    motor neuron the inter count grows by 0 or 1 per extra unit, so a short search hits n_out."""
    units = n_out + 3
    while True:
        wiring = AutoNCP(units, 1, sparsity_level=sparsity, seed=seed)
        n_inter = len(list(wiring.get_neurons_of_layer(0)))
        if n_inter == n_out:
            break
        if n_inter > n_out:  # cannot happen (see docstring); guard against an ncps change
            raise RuntimeError(f"AutoNCP skipped {n_out} inter neurons")
        units += 1
    wiring.build(n_in)
    inter, _, _ = _layers(wiring)
    return (wiring.sensory_adjacency_matrix[:, inter] != 0).astype(np.float32)


def random_mask(n_in: int, n_out: int, sparsity: float, seed: int) -> np.ndarray:
    """(n_in, n_out) mask of a sparse fully connected layer (the paper's NAC-sFC ablations): each
    synapse is kept with probability 1 - sparsity, and every output keeps at least one input."""
    _check_sparsity(sparsity)
    rng = np.random.default_rng(seed)
    mask = rng.random((n_in, n_out)) >= sparsity
    empty = ~mask.any(0)
    mask[rng.integers(0, n_in, int(empty.sum())), np.flatnonzero(empty)] = True
    return mask.astype(np.float32)
