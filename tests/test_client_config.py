"""The kubeconfig loader (autoscaler/client/config.py) registers the credentials it loads
for redaction, and the read side's default options (core.options) are the default
settings' own, without the settings loader."""

from __future__ import annotations

import json
from pathlib import Path

from autoscaler.client.config import make_api_client
from autoscaler.client.redact import mask, redact
from autoscaler.core.options import default_read_options
from autoscaler.settings import Settings

TOKEN = "kubeconfig-token-5f0c2b9e"


def test_the_default_read_options_are_the_default_settings():
    assert default_read_options() == Settings.model_validate({}).read_options()


async def test_the_loaded_token_is_masked_once_the_client_is_made(tmp_path: Path):
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "config"
    path.write_text(json.dumps(doc), encoding="utf-8")
    async with await make_api_client(Settings(kubeconfig=path).kube_options()):
        assert redact(f"401: bad token {TOKEN}") == "401: bad token ***"


def test_mask_masks_the_longest_secret_whole():
    assert mask("a secret-long b secret", ["secret", "secret-long", ""]) == "a *** b ***"
