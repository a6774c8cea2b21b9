"""An actor whose node lacks a plugin of the job's chain stops the job in one line, as one that lacks the model does.

It wrote no error of its own: every line then failed while decoding ("unknown sampler"), one line of the command's
output each (10^5 for a job of 10^5 prompts), or an error record each with --on-error skip. Run in this process,
without Ray: the test plugin that registers the chain's sampler is left out here, as on such a node."""

from __future__ import annotations

import json

import numpy as np
import pytest
from decodekit_cli.batch_settings import BatchSettings
from decodekit_ray.decoder import ActorSetupError, LineDecoder
from test_cli import MODEL

import decodekit.plugins


def test_a_chain_sampler_missing_on_the_node_stops_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("decodekit_ray.decoder._on_gpu", lambda model: model)  # no Ray: no GPU of its own
    monkeypatch.setattr("ray.util.get_node_ip_address", lambda: "10.0.0.7")
    monkeypatch.setenv("DECODEKIT_EXTRA_PLUGINS", "cli_testplugin")  # the model, not batch_testplugin's fail_on
    monkeypatch.setattr(decodekit.plugins, "_registry", None)  # built again with the test plugin, put back after
    settings = BatchSettings(
        model=MODEL, chain="fail_on(token=2) | temperature(0.8)", max_new_tokens=3, seed=0, cache="dense"
    )
    decoder = LineDecoder(settings)
    batch = {"line": np.arange(1, 3), "data": np.array([b'{"prompt": "a"}', b'{"prompt": "b"}'], dtype=object)}
    with pytest.raises(ActorSetupError) as caught:
        decoder(batch)
    message = str(caught.value)
    assert message.startswith("--ray: an actor on node 10.0.0.7 cannot build the job's chain, cache and strategy: ")
    assert "'fail_on'" in message and message.endswith("(docs/scale-out.md, 'What every node needs')")


LINE_CHAIN = b'{"prompt": "a", "chain": "fail_on(token=2) | temperature(0.8)"}'  # fail_on: batch_testplugin's


@pytest.mark.parametrize("checked", [True, False])
def test_a_line_chain_sampler_missing_on_the_node(monkeypatch: pytest.MonkeyPatch, checked: bool) -> None:
    # The command had checked the line with its plugins (checked): the line's error record ("unknown sampler") was the
    # node's lack, and the output differed from the local job's. From Python (not checked) the actor's record stands.
    monkeypatch.setattr("decodekit_ray.decoder._on_gpu", lambda model: model)
    monkeypatch.setattr("ray.util.get_node_ip_address", lambda: "10.0.0.7")
    monkeypatch.setenv("DECODEKIT_EXTRA_PLUGINS", "cli_testplugin")
    monkeypatch.setattr(decodekit.plugins, "_registry", None)
    settings = BatchSettings(model=MODEL, chain="temperature(0.8)", max_new_tokens=3, seed=0, cache="dense")
    decoder = LineDecoder(settings, checked=checked)
    batch = {"line": np.array([4]), "data": np.array([LINE_CHAIN], dtype=object)}
    if not checked:
        (record,) = decoder(batch)["record"]
        assert json.loads(record)["error"]["type"] == "UnknownNameError"
        return
    with pytest.raises(ActorSetupError) as caught:
        decoder(batch)
    message = str(caught.value)
    assert message.startswith("--ray: an actor on node 10.0.0.7 cannot decode line 4: unknown sampler 'fail_on'; ")
    assert message.endswith(
        "every node needs the model and the plugins the job uses (docs/scale-out.md, 'What every node needs')"
    )
