"""Notification bodies and delivery decisions (``core.notifications``): the
CloudEvent's attributes and data, Slack's defanging of tenant text, the bounds on
clusters and messages, which reasons notify, receiver URLs checked at start, the
backoff and which answers are retried."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.core.notifications.delivery import (
    ATTEMPTS,
    MAX_BACKOFF,
    Receiver,
    backoff,
    receiver_url,
    worth_retrying,
)
from crs_controller.core.notifications.payloads import (
    CLOUDEVENTS_CONTENT_TYPE,
    CLUSTERS_SHOWN,
    MESSAGE_LIMIT,
    NOTIFIED_REASONS,
    Notice,
    body,
    notice,
    slack,
    slack_defang,
    slack_escape,
)

WHEN = datetime(2026, 11, 28, 3, 4, 5, tzinfo=UTC)


def made(reason: str = "RolloutHalted", message: str = "halted: 1 cluster failed", **kw) -> Notice:
    told = notice(
        reason,
        kw.pop("namespace", "fleet"),
        kw.pop("crs", "cni"),
        message,
        revision=kw.pop("revision", "abc123"),
        clusters=kw.pop("clusters", ["c2", "c1"]),
        id="3f8e-id",
        time=WHEN,
    )
    assert told is not None
    return told


def test_a_cloudevent_in_structured_mode_carries_the_contract_fields() -> None:
    event, content_type = body(made(), "cloudevents")
    assert content_type == CLOUDEVENTS_CONTENT_TYPE
    assert content_type.startswith("application/cloudevents+json")
    assert event == {
        "specversion": "1.0",
        "type": "dev.crs.rollouthalted",
        "source": "crs-controller",
        "id": "3f8e-id",
        "time": "2026-11-28T03:04:05Z",
        "subject": "fleet/cni",
        "datacontenttype": "application/json",
        "data": {
            "reason": "RolloutHalted",
            "crs": "cni",
            "namespace": "fleet",
            "revision": "abc123",
            "message": "halted: 1 cluster failed",
            "clusters": ["c1", "c2"],
            "clustersOmitted": 0,
        },
    }
    json.dumps(event)  # one JSON object


@pytest.mark.parametrize("reason", NOTIFIED_REASONS)
def test_every_notified_reason_is_its_type_in_lower_case(reason: str) -> None:
    event, _ = body(made(reason), "cloudevents")
    assert event["type"] == f"dev.crs.{reason.lower()}"
    assert event["data"]["reason"] == reason


@pytest.mark.parametrize("reason", ["RolloutStarted", "Applied", "ApplyFailed", "InvalidSpec"])
def test_other_reasons_make_no_notice(reason: str) -> None:
    assert notice(reason, "ns", "crs", "m", revision=None, clusters=[], id="i", time=WHEN) is None


def test_slack_escapes_tenant_text_so_it_can_neither_link_nor_mention() -> None:
    hostile = "<!channel> see <https://evil.example|docs> & more"
    text = body(made(message=hostile, crs="a&b"), "slack")[0]["text"]
    assert "<" not in text and ">" not in text
    assert "&lt;!channel&gt; see &lt;https[:]//evil[.]example|docs&gt; &amp; more" in text
    assert text.startswith("*RolloutHalted* fleet/a&amp;b\n")
    assert "revision abc123" in text and "clusters: c1, c2" in text


# What Slack would make a link, a mention or formatting of, in a defanged piece.
SLACK_FINDS = re.compile(r"://|\w\.[^\W\d_]|[*_~`@#<>]|^&gt;")


def test_slack_shows_tenant_text_with_no_link_mention_or_markup() -> None:
    message = "x https://evil.example y *b* <!channel> _i_ ~s~ `c` @here #general"
    told = made(message=message, crs="www.evil.example", clusters=["prod.eu", "c_1"])
    header, shown, revision, clusters = slack(told)["text"].split("\n")
    assert header == "*RolloutHalted* fleet/www[.]evil[.]example"  # only ours is bold
    assert shown == (
        "x https[:]//evil[.]example y \N{ASTERISK OPERATOR}b\N{ASTERISK OPERATOR} "
        "&lt;!channel&gt; \N{FULLWIDTH LOW LINE}i\N{FULLWIDTH LOW LINE} "
        "\N{TILDE OPERATOR}s\N{TILDE OPERATOR} "
        "\N{MODIFIER LETTER GRAVE ACCENT}c\N{MODIFIER LETTER GRAVE ACCENT} "
        "\N{FULLWIDTH COMMERCIAL AT}here \N{FULLWIDTH NUMBER SIGN}general"
    )
    assert not SLACK_FINDS.search(shown)
    assert clusters == "clusters: c\N{FULLWIDTH LOW LINE}1, prod[.]eu"
    assert revision == "revision abc123"
    # A line of its own that a tenant starts with ">" is no quote.
    quoted = slack(made(message="> quoted"))["text"].split("\n")[1]
    assert quoted == "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} quoted"
    # Numbers keep their dots: only a dot before a letter is a host name's.
    assert slack_defang("v1.2.3 of 0.5") == "v1.2.3 of 0.5"


@given(st.text())
def test_slack_defanging_leaves_nothing_slack_would_read(text: str) -> None:
    assert not SLACK_FINDS.search(slack_defang(text))


@given(st.text())
def test_slack_escaping_leaves_no_markup_and_loses_nothing(text: str) -> None:
    escaped = slack_escape(text)
    assert "<" not in escaped and ">" not in escaped
    unescaped = escaped.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    assert unescaped == text


def test_clusters_are_bounded_and_the_rest_counted() -> None:
    told = made(clusters=[f"c{i:03d}" for i in range(500)])
    assert told.clusters == tuple(f"c{i:03d}" for i in range(CLUSTERS_SHOWN))
    assert told.clusters_omitted == 500 - CLUSTERS_SHOWN
    assert body(told, "cloudevents")[0]["data"]["clustersOmitted"] == 480
    assert f"and {500 - CLUSTERS_SHOWN} more" in body(told, "slack")[0]["text"]


def test_tenant_text_is_made_safe_and_bounded() -> None:
    told = made(message="x" * 5000 + "\x1b[2J", crs="evil\u202ename", clusters=["a\r\nb"])
    assert len(told.message) == MESSAGE_LIMIT
    assert "\x1b" not in json.dumps(body(told, "cloudevents")[0])
    assert told.crs == "evil\\u202ename"
    assert told.clusters == ("a\\r\\nb",)


@pytest.mark.parametrize(
    "url",
    ["http://receiver:8080/hook", "https://hooks.example.com/services/T0/B0/secret?x=1"],
)
def test_http_and_https_receivers_are_taken(url: str) -> None:
    assert receiver_url(url) == url


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://host/x", "scheme must be http or https"),
        ("hooks.example.com/x", "scheme must be http or https"),
        ("file:///etc/passwd", "scheme must be http or https"),
        ("https:///path", "names no host"),
        ("https://user:pw@host/x", "credentials in the URL"),
        ("https://host:port/x", "not a URL"),
    ],
)
def test_other_receivers_are_refused_without_repeating_the_url(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as caught:
        receiver_url(url)
    assert url not in str(caught.value)


def test_a_receiver_is_shown_without_its_path_or_token() -> None:
    receiver = Receiver("https://hooks.example.com:8443/services/T0/B0/secret?k=v", token="tok")
    assert receiver.shown == "https://hooks.example.com:8443"
    assert "tok" not in repr(receiver) and "secret" not in receiver.shown


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff(50) == MAX_BACKOFF


@pytest.mark.parametrize(
    ("status", "attempt", "again"),
    [
        (None, 1, True),  # no answer within the deadline
        (500, 1, True),
        (503, ATTEMPTS - 1, True),
        (429, 1, True),
        (408, 2, True),
        (500, ATTEMPTS, False),  # the last attempt
        (None, ATTEMPTS, False),
        (200, 1, False),
        (204, 1, False),
        (400, 1, False),
        (401, 1, False),
        (404, 1, False),
        (301, 1, False),
    ],
)
def test_what_is_retried(status: int | None, attempt: int, again: bool) -> None:
    assert worth_retrying(status, attempt) is again
