"""``run``'s notification flags: receivers checked at start (exit 2 naming the flag,
never repeating a URL that may hold a secret), the format, and the token file."""

from __future__ import annotations

from pathlib import Path

import pytest

from crs_controller.app.cli import _parser, main


def exits(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return int(exited.value.code or 0), capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://hooks.example.com/T0/secret", "the scheme must be http or https"),
        ("hooks.example.com/T0/secret", "the scheme must be http or https"),
        ("https://", "the URL names no host"),
        ("https://me:secret@hooks.example.com/", "credentials in the URL are refused"),
        # Hosts the HTTP client cannot encode: refused at start, not at the first POST.
        ("http://xn--/secret", "the host is not a valid host name"),
        ("http://xn--zz.example/secret", "the host is not a valid host name"),
        ("http://\N{SNOWMAN}.example/secret", "the host is not a valid host name"),
        ("http://a..example/secret", "the host is not a valid host name"),
        ("http://bad host.example/secret", "the host is not a valid host name"),
        (f"http://{'a' * 64}.example/secret", "the host is not a valid host name"),
    ],
)
def test_a_receiver_that_is_not_http_exits_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], url: str, error: str
) -> None:
    code, err = exits(capsys, ["run", "--notify-url", "https://ok.example/", "--notify-url", url])
    assert code == 2
    assert f"argument --notify-url: {error}" in err
    assert "secret" not in err


def test_an_unknown_format_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = exits(capsys, ["run", "--notify-format", "teams"])
    assert code == 2 and "argument --notify-format: invalid choice: 'teams'" in err


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "cannot be read"),
        ("", "must hold one token"),
        ("a\nb", "must hold one token"),
        # Not an HTTP header's value: the token must be visible ASCII characters.
        ("s\N{LATIN SMALL LETTER E WITH ACUTE}cret", "of visible ASCII characters"),
        ("s3\N{NO-BREAK SPACE}cret", "of visible ASCII characters"),
        ("s3\x7fcret", "of visible ASCII characters"),
    ],
)
def test_a_token_file_must_hold_one_token(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | None, error: str
) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    code, err = exits(capsys, ["run", "--notify-token-file", str(path)])
    assert code == 2 and f"argument --notify-token-file: {path}: " in err and error in err
    assert "cret" not in err  # the token is never repeated


def test_receivers_format_and_token_are_read(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    parser, _ = _parser()
    args = parser.parse_args(
        ["run", "--notify-url", "http://a/", "--notify-url", "https://b/x", "--notify-format",
         "slack", "--notify-token-file", str(tmp_path / "token"), "--notify-url",
         "https://b\N{LATIN SMALL LETTER U WITH DIAERESIS}cher.example:8443/T0",
         "--notify-url", "http://[::1]:8080/", "--notify-url", "http://10.0.0.1/",
         "--notify-url", "https://xn--bcher-kva.example./in"]
    )  # fmt: skip
    assert args.notify_url == [
        "http://a/",
        "https://b/x",
        "https://b\N{LATIN SMALL LETTER U WITH DIAERESIS}cher.example:8443/T0",
        "http://[::1]:8080/",
        "http://10.0.0.1/",
        "https://xn--bcher-kva.example./in",
    ]
    assert (args.notify_format, args.notify_token_file) == ("slack", "s3cret")
    defaults = parser.parse_args(["run"])
    assert (defaults.notify_url, defaults.notify_format) == ([], "cloudevents")
