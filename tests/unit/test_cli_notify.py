"""``run``'s notification flags: receivers checked at start (exit 2 naming the flag,
never repeating a URL that may hold a secret), the URL file (errors name its line,
never what it holds), the format, the token file and a token never sent in clear
text; an argument error never repeats a value given, a misspelt flag's URL too."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from crs_controller.app.cli import COMMANDS, _parser, _receivers, main


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


def holding(path: Path, content: str | None) -> Path:
    """``path`` holding ``content``; missing when None."""
    if content is not None:
        path.write_text(content)
    return path


def test_an_unknown_format_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = exits(capsys, ["run", "--notify-format", "teams"])
    assert code == 2 and "argument --notify-format: invalid choice: '\\u2026'" in err
    assert "teams" not in err  # a value given is never repeated


SECRET_URL = "https://hooks.slack.com/services/T0/B0/SECRET"


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["run", "--notify-urls", SECRET_URL], "unrecognized arguments: --notify-urls \\u2026"),
        (["run", f"--notify-urls={SECRET_URL}"], "unrecognized arguments: --notify-urls=\\u2026"),
        (["run", f"--notify={SECRET_URL}"], "ambiguous option: --notify=\\u2026 could match"),
        (["run", "--notify-format", SECRET_URL], "invalid choice: '\\u2026'"),
        (["run", "--log-format", "console", "--notify-urls", SECRET_URL], "--notify-urls …"),
        (["status", "cni", "--notify-url", SECRET_URL], "unrecognized arguments: --notify-url …"),
        (["demo", "--workloads", SECRET_URL], "invalid int value: '…'"),
        ([SECRET_URL], "invalid choice: '…'"),
        # A value glued to a short flag: argparse quotes what follows the flag.
        (["run", f"-h{SECRET_URL}"], "argument -h/--help: ignored explicit argument '\\u2026'"),
        ([f"-h{SECRET_URL}"], "argument -h/--help: ignored explicit argument '…'"),
        (["diff", f"-h{SECRET_URL}"], "argument -h/--help: ignored explicit argument '…'"),
        (["status", "cni", f"-u{SECRET_URL}"], "unrecognized arguments: -u…"),
        (
            ["status", "cni", f"--notify-url{SECRET_URL}"],
            "unrecognized arguments: --notify-urlhttps…",
        ),
        # Part of a value quoted by the command's own message.
        (["uninstall", "--timeout", "5mSECRET"], "invalid duration '…': unknown unit '…'"),
    ],
)
def test_an_argument_error_never_repeats_a_value(
    capsys: pytest.CaptureFixture[str], argv: list[str], shown: str
) -> None:
    with structlog.testing.capture_logs() as logs:
        code, err = exits(capsys, argv)
    assert code == 2
    assert shown in err
    for part in ("SECRET", "hooks.slack.com", "://", "services"):
        assert part not in err and part not in repr(logs)


def test_an_unknown_command_lists_every_command_even_one_given_elsewhere(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = exits(capsys, [SECRET_URL, "run", "--notify-url", "status"])
    commands = ", ".join(repr(name) for name in ("run", "demo", *COMMANDS, "completion"))
    assert code == 2 and f"invalid choice: '…' (choose from {commands})" in err
    assert "SECRET" not in err


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
    path = holding(tmp_path / "token", content)
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


def test_receivers_are_read_from_a_file_one_a_line(tmp_path: Path) -> None:
    path = tmp_path / "urls"
    path.write_text(
        "# the team's channel\n\nhttps://hooks.slack.com/services/T0/B0/SECRET\n"
        "  http://127.0.0.1:9000/in  \n# https://old.example/\n"
    )
    parser, commands = _parser()
    args = parser.parse_args(
        ["run", "--notify-url", "https://a.example/", "--notify-url-file", str(path)]
    )
    told = _receivers(commands["run"], args)
    assert [r.url for r in told] == [
        "https://a.example/",
        "https://hooks.slack.com/services/T0/B0/SECRET",
        "http://127.0.0.1:9000/in",
    ]


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "{path}: cannot be read (FileNotFoundError)"),
        ("# nothing yet\n\n", "{path}: holds no URL"),
        ("https://ok.example/\n\nftp://hooks.example/SECRET\n", "{path}:3: the scheme must be"),
        ("https://me:SECRET@hooks.example/\n", "{path}:1: credentials in the URL are refused"),
        ("https://bad host.example/SECRET\n", "{path}:1: the host is not a valid host name"),
    ],
)
def test_a_url_file_error_names_the_file_and_line_never_the_url(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | None, error: str
) -> None:
    path = holding(tmp_path / "urls", content)
    code, err = exits(capsys, ["run", "--notify-url-file", str(path)])
    assert code == 2
    assert f"argument --notify-url-file: {error.format(path=path)}" in err
    assert "SECRET" not in err and "hooks.example" not in err


@pytest.mark.parametrize(
    "urls",
    [
        ["--notify-url", "http://hooks.example/in"],
        ["--notify-url", "https://a.example/", "--notify-url", "http://10.0.0.1:8080/"],
        ["--notify-url-file", "{file}"],
    ],
)
def test_a_token_is_never_sent_in_clear_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, urls: list[str]
) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "urls").write_text("https://a.example/\nhttp://hooks.example/in\n")
    argv = ["run", "--notify-token-file", str(tmp_path / "token")]
    argv += [u.format(file=tmp_path / "urls") for u in urls]
    code, err = exits(capsys, argv)
    assert code == 2
    assert "argument --notify-token-file: the token would cross the network in clear text" in err
    assert "s3cret" not in err and "hooks.example" not in err and "10.0.0.1" not in err


def test_a_token_may_go_to_https_and_to_loopback_over_http(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    parser, commands = _parser()
    loopback = ["http://127.0.0.1:9000/", "http://[::1]/", "http://localhost:8080/", "https://a/"]
    argv = ["run", "--notify-token-file", str(tmp_path / "token")]
    for url in loopback:
        argv += ["--notify-url", url]
    told = _receivers(commands["run"], parser.parse_args(argv))
    assert [(r.url, r.token) for r in told] == [(url, "s3cret") for url in loopback]
    # Without a token, http goes anywhere, as before.
    plain = parser.parse_args(["run", "--notify-url", "http://hooks.example/in"])
    assert [r.token for r in _receivers(commands["run"], plain)] == [None]
