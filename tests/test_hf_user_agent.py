"""Hugging Face kernels' own ``tests/test_user_agent.py``, ported to this API.

Ported from Hugging Face kernels 0.17 (Apache-2.0). Test names and assertions follow the
original; what differs:

- HF reads the ``User-Agent`` its ``HfApi`` would send; here it is read from the
  requests the loopback CDN received while ``install_kernel(..., user_agent=...)``
  downloaded ``kernels-community/relu``.
- The client names itself ``flashhub-kernels/<version>`` where HF sends ``kernels/``.

Left out: ``test_user_agent_contains_core_fields``' ``python/``, ``backend/``,
``platform/`` and ``file_type/`` fields and ``test_user_agent_includes_torch``: HF sends
the Hub these for its download statistics; the CDN's ``User-Agent`` names the client and
what the caller appends, nothing of the machine (docs/layers.md). Hence also
``test_user_agent_telemetry_disabled``: there is no telemetry for
``HF_HUB_DISABLE_TELEMETRY`` to turn off, and ``user_agent=`` is sent as the caller asked.
``test_platform_format`` checks HF's private ``_platform()``.
"""

from __future__ import annotations

import pytest

from flashhub_kernels import __version__, install_kernel
from support.cdn_server import CdnServer
from support.hf_kernels import RELU, publish_relu


def sent_user_agents(cdn: CdnServer, user_agent: object) -> set[str]:
    """The ``User-Agent`` of every request a download of relu with ``user_agent`` made."""
    publish_relu(cdn.root)
    install_kernel(RELU, version=1, user_agent=user_agent)  # type: ignore[arg-type]
    assert cdn.requests
    return {request.headers["User-Agent"] for request in cdn.requests}


def test_user_agent_contains_core_fields(cdn: CdnServer) -> None:
    assert sent_user_agents(cdn, None) == {f"flashhub-kernels/{__version__}"}


def test_user_agent_with_string(cdn: CdnServer) -> None:
    (ua,) = sent_user_agents(cdn, "my-app/1.0")

    assert "my-app/1.0" in ua
    assert "flashhub-kernels/" in ua


def test_user_agent_with_dict(cdn: CdnServer) -> None:
    (ua,) = sent_user_agents(cdn, {"app": "test", "ver": "2.0"})

    assert "app/test" in ua
    assert "ver/2.0" in ua
    assert "flashhub-kernels/" in ua


@pytest.mark.parametrize("ua_input", [None, "my-app/1.0", {"app": "test", "ver": "2.0"}])
def test_user_agent_format_structure(cdn: CdnServer, ua_input: object) -> None:
    (ua,) = sent_user_agents(cdn, ua_input)

    fields = [f.strip() for f in ua.split(";") if f.strip()]
    # Each field should be key/value
    for field in fields:
        assert "/" in field, f"Field missing key/value separator: {field}"


@pytest.mark.parametrize("ua_input", [None, "", {}, "   "])
def test_user_agent_no_leading_or_empty_segment(cdn: CdnServer, ua_input: object) -> None:
    # Regression (HF): with no caller-supplied user_agent the header must not start with
    # a separator nor hold empty segments, which strict HTTP clients reject.
    (ua,) = sent_user_agents(cdn, ua_input)
    assert not ua.startswith(";"), f"user_agent must not start with ';': {ua!r}"
    for segment in ua.split(";"):
        assert segment.strip() != "", f"empty segment found in user_agent: {ua!r}"
