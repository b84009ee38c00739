"""`mask_url`: no part of a password ever reaches a log line, whatever characters it holds; `port_problem`
and `host_problem` name a URL's port and host as FFmpeg reads them, and never its credentials."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamlens.urls import hide_in, host_and_port, host_problem, is_url, mask_url, port_problem, url_origin


@pytest.mark.parametrize("url, password, shown", [
    ("rtsp://admin:s3cret@10.0.0.5:554/stream1", "s3cret", "rtsp://***@10.0.0.5:554/stream1"),
    ("rtsp://admin:p@ss@cam.local/live", "p@ss", "rtsp://***@cam.local/live"),
    ("rtsp://admin:pa/ss@cam.local/live", "pa/ss", "rtsp://***@cam.local/live"),
    ("rtsp://admin:a:b:c@cam.local/live", "a:b:c", "rtsp://***@cam.local/live"),
    ("rtsp://admin:p%40ss@cam.local/live", "p%40ss", "rtsp://***@cam.local/live"),
    ("rtsp://admin:x/@y@z#q?@cam.local/live", "x/@y@z#q?", "rtsp://***@cam.local/live"),
    ("http://viewer:hunter2@192.0.2.7:8080/video.mjpg", "hunter2", "http://***@192.0.2.7:8080/video.mjpg"),
    ("https://viewer:p@ss/1@cam.example/snap.jpg?x=1", "p@ss/1", "https://***@cam.example/snap.jpg?x=1"),
    ("rtsp://admin:p@ss/w:rd@[fe80::1]:554/s", "p@ss/w:rd", "rtsp://***@[fe80::1]:554/s"),
    ("rtsp://admin:my pass@cam/1", "my pass", "rtsp://***@cam/1"),
])
def test_no_part_of_the_password_shows(url, password, shown):
    assert mask_url(url) == shown
    if " " not in password:  # inside a message a URL ends at white space
        assert password not in mask_url(f"cannot open {url}: 401 Unauthorized")


@pytest.mark.parametrize("url", [
    "rtsp://10.0.0.5:554/stream1", "rtsp://[::1]:8554/cam", "http://cam.local/video.mjpg?size=720",
    "/dev/video0", "clips/a.mp4",
])
def test_a_url_without_credentials_is_unchanged(url):
    assert mask_url(url) == url


def test_a_user_without_password_is_hidden_too():
    assert mask_url("rtsp://admin@cam/1") == "rtsp://***@cam/1"


@pytest.mark.parametrize("text, shown", [
    ("av.error: [Errno 1] Forbidden: 'rtsp://admin:p@ss@cam/1'", "av.error: [Errno 1] Forbidden: 'rtsp://***@cam/1'"),
    ('open "rtsp://u:a/b@cam/1" failed', 'open "rtsp://***@cam/1" failed'),
    ("rtsp://u:pw@a/1 and http://v:p@w@b/2 down", "rtsp://***@b/2 down"),
    ("cams rtsp://u:pw@a/1 and http://v:p@w@b/2 down", "cams rtsp://***@a/1 and http://***@b/2 down"),
])
def test_urls_inside_messages_are_masked(text, shown):
    assert mask_url(text) == shown


def test_is_url_tells_urls_from_paths():
    assert [is_url(t) for t in ("rtsp://cam/1", "udp://@:5000", "clips/a.mp4", "/dev/video0", "C:/x.mp4")] == [
        True, True, False, False, False]


@pytest.mark.parametrize("url, host, port", [
    ("rtsp://admin:p@ss@cam.local:554/s", "cam.local", "554"),
    ("rtsp://[fe80::1]:8554/s", "fe80::1", "8554"),
    ("udp://@239.0.0.1:1234", "239.0.0.1", "1234"),
    ("srt://:9000?mode=listener", "", "9000"),
    ("http://cam/video.mjpg", "cam", None),
    ("rtsp://u:pa/ss@cam:554/x", "u", "pa"),  # FFmpeg ends the host at the first '/'
])
def test_host_and_port_as_ffmpeg_reads_them(url, host, port):
    assert host_and_port(url)[:2] == (host, port)


@pytest.mark.parametrize("url", ["rtsp://cam:554/x", "rtsp://cam/x", "rtsp://[::1]:65535/x", "udp://@:1234",
                                 "srt://cam:1?mode=caller", "rtsp://cam:00554/x", "/dev/video0", "clips/a.mp4"])
def test_a_usable_port_or_none_is_no_problem(url):
    assert port_problem(url) is None


@pytest.mark.parametrize("url, problem", [
    ("rtsp://cam:99999/x", "port must be a number from 1 to 65535, got 99999: rtsp://cam:99999/x"),
    ("rtsp://cam:0/x", "port must be a number from 1 to 65535, got 0: rtsp://cam:0/x"),
    ("rtsp://u:pw@cam:notaport/x", "port must be a number from 1 to 65535, got 'notaport': rtsp://***@cam:notaport/x"),
    ("http://cam:/x", "port must be a number from 1 to 65535, got '': http://cam:/x"),
    ("rtsp://[::1]:70000/x", "port must be a number from 1 to 65535, got 70000: rtsp://[::1]:70000/x"),
    ("rtsp://fe80::1/x", "port must be a number from 1 to 65535, got ':1': rtsp://fe80::1/x "
                         "(an IPv6 address is written in brackets: [fe80::1]:554)"),
    ("udp://@:" + "9" * 5000, "port must be a number from 1 to 65535, got 999999999...: udp://***@:99999"),
], ids=["99999", "0", "notaport", "empty", "ipv6-70000", "ipv6-unbracketed", "5000-digits"])
def test_a_port_ffmpeg_cannot_use_is_named(url, problem):
    assert port_problem(url).startswith(problem)
    assert len(port_problem(url)) < 200


@pytest.mark.parametrize("url, shown", [("rtsp://admin:pa/ss@cam:554/x", "rtsp://***@cam:554/x"),
                                        ("rtsp://u:xy:z/w@cam/x", "rtsp://***@cam/x")])
def test_a_port_read_out_of_a_password_is_not_shown(url, shown):
    # FFmpeg reads port 'pa' (and 'xy') out of the password: the line says why, and shows neither
    assert port_problem(url) == (f"port must be a number from 1 to 65535: {shown} (a '/', '?' or '#' in a user "
                                 "name or password is written %2F, %3F, %23)")


def test_an_unknown_host_is_named_without_credentials():
    # .invalid never resolves (RFC 6761); a resolver that cannot answer in time is named as such
    problem = host_problem("rtsp://admin:s3cret@cam7.invalid:554/stream1")
    assert problem in ("cannot resolve host cam7.invalid", "cannot resolve host cam7.invalid: no answer in 2 s")


@pytest.mark.parametrize("url", ["rtsp://10.0.0.5:554/s", "rtsp://[fe80::1%25eth0]:554/s", "udp://@239.0.0.1:1234",
                                 "rtsp://localhost:8554/s", "srt://:9000?mode=listener", "/dev/video0",
                                 "rtsp://admin:pa/ss@cam7.invalid/x"])
def test_addresses_known_hosts_and_hosts_that_may_be_a_password_are_no_problem(url):
    assert host_problem(url) is None


# -- secrets outside user:password@ (issue 25, point 4) -------------------------------------------

@pytest.mark.parametrize("url, shown", [
    ("rtsp://cam/x?user=admin&password=secret", "rtsp://cam/x?user=admin&password=***"),
    ("rtsp://cam/x?pwd=secret&channel=1", "rtsp://cam/x?pwd=***&channel=1"),
    ("http://cam/snap.jpg?api_key=secret", "http://cam/snap.jpg?api_key=***"),
    ("https://cam/live.m3u8?Access_Token=secret;x=1", "https://cam/live.m3u8?Access_Token=***;x=1"),
    ("srt://cam:9000?passphrase=secret&mode=caller", "srt://cam:9000?passphrase=***&mode=caller"),
    ("https://cam/v?auth=secret#sig=secret", "https://cam/v?auth=***#sig=***"),
    ("rtsp://u:pw@cam/x?secret=s", "rtsp://***@cam/x?secret=***"),
    ("rtsp://cam/x?size=720&fps=30", "rtsp://cam/x?size=720&fps=30"),
])
def test_secret_looking_query_values_are_hidden(url, shown):
    assert mask_url(url) == shown
    assert mask_url(f"cannot open '{url}': 404") == f"cannot open '{shown}': 404"


@pytest.mark.parametrize("url, origin", [
    ("https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://hooks.slack.com"),
    ("https://discord.com/api/webhooks/123/SECRET?wait=true", "https://discord.com"),
    ("http://bot:pw@10.0.0.9:8080/in", "http://10.0.0.9:8080"),
    ("http://[::1]:9/hook", "http://[::1]:9"),
    ("http://u:p/w@host/hook", "http://***"),
])
def test_a_webhook_url_is_shown_as_its_origin(url, origin):
    assert url_origin(url) == origin


def test_an_http_librarys_error_shows_no_part_of_the_webhooks_path():
    url = "https://hooks.slack.com/services/T0/B0/SECRET?x=KEY"
    error = ("HTTPSConnectionPool(host='hooks.slack.com', port=443): Max retries exceeded with url: "
             "/services/T0/B0/SECRET?x=KEY (Caused by NewConnectionError('refused'))")
    shown = hide_in(error, url)
    assert "SECRET" not in shown and "KEY" not in shown and "hooks.slack.com" in shown
    assert hide_in(f"cannot post to {url}", url) == "cannot post to https://hooks.slack.com"


#: secrets begin with two capitals, which no host, path or user below holds, so one found in the
#: output is the secret's own
_SECRET = st.builds(lambda head, body: head + body, st.text("ABCDEFGHJKLMNPQRSTUVWXYZ", min_size=2, max_size=2),
                    st.text("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", min_size=4, max_size=16))
_HOST = st.builds(lambda name, domain, port: name + domain + port, st.text("abcdefghij", min_size=1, max_size=8),
                  st.sampled_from(["", ".local", ".example.com"]), st.sampled_from(["", ":554", ":8080"]))
_PATH = st.lists(st.text("abcxyz0189._-", min_size=1, max_size=6), max_size=3).map(
    lambda parts: "".join("/" + p for p in parts))
_SCHEME = st.sampled_from(["rtsp", "rtsps", "http", "https", "rtmp", "srt", "redis"])


@settings(max_examples=150, deadline=None, database=None)
@given(scheme=_SCHEME, host=_HOST, path=_PATH, secret=_SECRET, user=st.text("abcdef", max_size=6),
       extra=st.text("ABCXYZ019@:/#?%!$&()*+,;=-._~' \"", max_size=8))
def test_no_password_survives_mask_url(scheme, host, path, secret, extra, user):
    password = secret + extra  # any character a password may hold, '@', '/', ':', '#' included
    url = f"{scheme}://{user}:{password}@{host}{path}"
    assert secret not in mask_url(url)
    if not set(extra) & set(" '\""):  # in a message, a URL ends at white space or a quote
        assert secret not in mask_url(f"cannot open {url}: 401 Unauthorized")
        assert secret not in mask_url(f"cannot open '{url}': 401 Unauthorized")


@settings(max_examples=150, deadline=None, database=None)
@given(scheme=_SCHEME, host=_HOST, path=_PATH, secret=_SECRET,
       word=st.sampled_from(["password", "passwd", "pass", "pwd", "token", "key", "secret", "passphrase", "auth",
                             "signature", "credential"]),
       prefix=st.sampled_from(["", "api_", "x-", "access_", "my"]), suffix=st.sampled_from(["", "_v2", "id", "s"]),
       upper=st.booleans(), before=st.sampled_from(["", "a=1&", "channel=2;"]), after=st.sampled_from(["", "&b=2", "#f"]))
def test_no_secret_query_value_survives_mask_url(scheme, host, path, secret, word, prefix, suffix, upper, before, after):
    name = prefix + (word.upper() if upper else word) + suffix
    url = f"{scheme}://{host}{path}?{before}{name}={secret}{after}"
    assert secret not in mask_url(url)
    assert secret not in mask_url(f"GET {url} failed: 'timed out'")


@settings(max_examples=100, deadline=None, database=None)
@given(host=_HOST, path=_PATH, secret=_SECRET, query=st.sampled_from(["", "?wait=true", "?x=1&y=2"]))
def test_no_webhook_path_secret_survives_url_origin_or_hide_in(host, path, secret, query):
    url = f"https://{host}{path}/{secret}{query}"
    assert secret not in url_origin(url)
    message = f"HTTPSConnectionPool(host='{host}'): Max retries exceeded with url: {path}/{secret}{query} (refused)"
    assert secret not in hide_in(message, url)
    assert secret not in hide_in(f"cannot post to '{url}'", url)
