"""Every torch.distributed call a correct student may make works through the relay as on gloo:
the same results on every rank (tests/relay_api_probe.py makes them all), at 2, 3 and 4
ranks. A call the relay got wrong, or lacks, would reject a correct implementation."""
import pytest
import torch

from rtp_course.runtime import relay as _relay
from rtp_course.runtime.launcher import launch
from rtp_course.runtime.relay.server import Relay
from relay_api_probe import every_api

pytestmark = pytest.mark.skipif(not _relay.supported(), reason="this torch cannot run the relay "
                                "(torch.distributed's C++ does not call a Python handle's wait)")


def _same(a, b, where=""):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), f"{where}: {a} != {b}"
    elif isinstance(a, dict):
        assert set(a) == set(b), f"{where}: {sorted(set(a) ^ set(b))}"
        for k in a:
            if a[k] is not None:      # None: gloo of this torch lacks the call
                _same(a[k], b[k], f"{where}{k}")
    else:
        assert a == b, f"{where}: {a} != {b}"


@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_api_gives_through_the_relay_what_it_gives_on_gloo(world):
    on_gloo = launch(every_api, world, backend="gloo", timeout=120)
    relay = Relay(world).start()
    try:
        relayed = launch(every_api, world, backend="gloo", timeout=120, relay=relay)
    finally:
        relay.stop()
    for rank in range(world):
        _same(on_gloo[rank], relayed[rank], f"rank {rank}: ")
    assert not relay.account.broken or all("ended" in w for w in relay.account.broken.values())
