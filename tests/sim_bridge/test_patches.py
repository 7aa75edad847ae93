"""eventlet's websocket unmasking, replaced by a vectorised one that gives the same bytes."""

import numpy as np

from sim_bridge import patches


def test_fast_unmasking_gives_eventlets_bytes():
    rng = np.random.default_rng(1)
    for length in (0, 1, 3, 4, 5, 1000, 20_001):
        data = rng.integers(0, 256, length + 7, dtype=np.uint8).tobytes()
        mask = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()
        for offset in range(6):
            for n in (None, length):
                assert patches.fast_apply_mask(data, mask, n, offset) == patches.slow_apply_mask(data, mask, n, offset)
    patches.apply()
    patches.apply()  # idempotent
    from eventlet.websocket import RFC6455WebSocket

    assert RFC6455WebSocket._apply_mask is patches.fast_apply_mask
