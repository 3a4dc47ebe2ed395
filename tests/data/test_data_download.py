"""Downloads against a local HTTP server on 127.0.0.1: checksum, cut connections resumed with Range,
servers that ignore Range, and no server at all."""

import hashlib
import socket
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from data_builders import write_cifar_archive
from data_builders import private_cache  # noqa: F401  (private_cache is an autouse fixture)
from reluattn.data import DataError, DataWarning, load_dataset
from reluattn.data import download as download_module
from reluattn.data.download import Archive, download, fetch_cifar


class FileServer:
    """Serves `payload` at any path; can cut the first N responses short and can ignore Range."""

    def __init__(self, payload: bytes, cut_first: int = 0, cut_at: int | None = None, honour_range: bool = True):
        self.payload, self.cut_first, self.cut_at, self.honour_range = payload, cut_first, cut_at, honour_range
        self.ranges = []  # the Range header of each request (None when absent)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                requested = self.headers.get("Range")
                server.ranges.append(requested)
                start = int(requested[len("bytes="):].split("-")[0]) if requested and server.honour_range else 0
                if start >= len(server.payload):
                    self.send_error(416)
                    return
                body = server.payload[start:]
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(server.payload) - 1}/{len(server.payload)}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if len(server.ranges) <= server.cut_first:  # send part, then drop the connection
                    self.wfile.write(body[: server.cut_at - start])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/cifar-10-python.tar.gz"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


PAYLOAD = bytes(np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8))
PAYLOAD_MD5 = hashlib.md5(PAYLOAD).hexdigest()


def test_download_verifies_and_renames(tmp_path):
    destination = tmp_path / "d" / "file.tar.gz"
    with FileServer(PAYLOAD) as server:
        assert download(server.url, destination, PAYLOAD_MD5, progress=False) == destination
    assert destination.read_bytes() == PAYLOAD
    assert not destination.with_name("file.tar.gz.part").exists()
    assert server.ranges == [None]


@pytest.mark.parametrize("cut", [False, True])
def test_a_symlink_planted_as_the_part_file_is_replaced_not_written_through(tmp_path, cut):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious, 21 bytes!!\n")
    destination = tmp_path / "d" / "file.tar.gz"
    destination.parent.mkdir()
    destination.with_name("file.tar.gz.part").symlink_to(victim)
    with FileServer(PAYLOAD, cut_first=1 if cut else 0) as server:  # cut: the second attempt resumes our file
        assert download(server.url, destination, PAYLOAD_MD5, progress=False) == destination
    assert victim.read_bytes() == b"precious, 21 bytes!!\n"
    assert destination.read_bytes() == PAYLOAD and not destination.is_symlink()
    assert server.ranges[0] is None  # the link's 21 bytes were not taken for a partial download


def test_checksum_mismatch_keeps_nothing(tmp_path):
    destination = tmp_path / "file.tar.gz"
    with FileServer(PAYLOAD) as server, pytest.raises(DataError) as excinfo:
        download(server.url, destination, "0" * 32, progress=False)
    message = str(excinfo.value)
    assert "\n" not in message and PAYLOAD_MD5 in message and "0" * 32 in message
    assert not destination.exists() and not destination.with_name("file.tar.gz.part").exists()


def test_cut_connection_is_resumed_with_range(tmp_path):
    destination = tmp_path / "file.tar.gz"
    with FileServer(PAYLOAD, cut_first=1, cut_at=120_000) as server:
        download(server.url, destination, PAYLOAD_MD5, progress=False)
    assert destination.read_bytes() == PAYLOAD
    assert server.ranges == [None, "bytes=120000-"]


def test_download_cut_every_time_keeps_the_part_and_a_later_run_resumes(tmp_path):
    destination = tmp_path / "file.tar.gz"
    part = tmp_path / "file.tar.gz.part"
    with FileServer(PAYLOAD, cut_first=1, cut_at=100_000) as server, pytest.raises(DataError) as excinfo:
        download(server.url, destination, PAYLOAD_MD5, progress=False, attempts=1)
    assert "run again to resume" in str(excinfo.value) and "\n" not in str(excinfo.value)
    assert part.read_bytes() == PAYLOAD[:100_000] and not destination.exists()
    with FileServer(PAYLOAD) as server:
        download(server.url, destination, PAYLOAD_MD5, progress=False)
    assert server.ranges == ["bytes=100000-"]
    assert destination.read_bytes() == PAYLOAD and not part.exists()


def test_server_ignoring_range_restarts_cleanly(tmp_path):
    destination = tmp_path / "file.tar.gz"
    (tmp_path / "file.tar.gz.part").write_bytes(b"stale bytes from some other file")
    with FileServer(PAYLOAD, honour_range=False) as server:
        download(server.url, destination, PAYLOAD_MD5, progress=False)
    assert server.ranges == ["bytes=32-"]  # asked to resume; got the whole file and started over
    assert destination.read_bytes() == PAYLOAD


def test_http_error_is_one_line(tmp_path):
    class Missing(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_error(404)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Missing)
    threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True).start()
    try:
        with pytest.raises(DataError) as excinfo:
            download(f"http://127.0.0.1:{httpd.server_address[1]}/x", tmp_path / "x", PAYLOAD_MD5, progress=False)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert "HTTP 404" in str(excinfo.value) and "\n" not in str(excinfo.value)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens here once the socket is closed


def test_no_server_fails_at_once_with_a_hint(tmp_path, monkeypatch):
    calls = []
    real_urlopen = urllib.request.urlopen

    def counting_urlopen(*args, **kwargs):
        calls.append(kwargs.get("timeout"))
        return real_urlopen(*args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", counting_urlopen)
    monkeypatch.setenv("RELUATTN_CIFAR10_URL", f"http://127.0.0.1:{closed_port()}/cifar-10-python.tar.gz")
    with pytest.raises(DataError) as excinfo:
        load_dataset(None, "train", progress=False)
    message = str(excinfo.value)
    assert "\n" not in message
    assert "could not download cifar-10-python.tar.gz" in message and "--data" in message and "RELUATTN_DATA" in message
    assert len(calls) == 1 and calls[0] <= 10  # one short attempt, no retry loop
    assert not list((tmp_path / "cache").rglob("*.part"))


def test_load_dataset_downloads_cifar_into_the_cache_once(tmp_path, monkeypatch):
    (tmp_path / "built").mkdir()
    archive, expected, classes = write_cifar_archive(tmp_path / "built", "cifar10")
    payload = archive.read_bytes()
    fake = Archive("cifar-10-python.tar.gz", "http://unused.invalid/", hashlib.md5(payload).hexdigest(),
                   "RELUATTN_CIFAR10_URL")
    monkeypatch.setitem(download_module.ARCHIVES, "cifar10", fake)
    with FileServer(payload) as server:
        monkeypatch.setenv("RELUATTN_CIFAR10_URL", server.url)
        data = load_dataset(None, "test", progress=False)
    np.testing.assert_array_equal(data.images, expected["test"][0])
    assert data.class_names == classes
    stored = tmp_path / "cache" / "downloads" / "cifar-10-python.tar.gz"
    assert stored.read_bytes() == payload
    # The server is gone now: the cached archive serves the other split.
    train = load_dataset(None, "train", progress=False)
    np.testing.assert_array_equal(train.labels, expected["train"][1])
    assert fetch_cifar("cifar10", progress=False) == stored


def test_fetch_refuses_unknown_datasets():
    with pytest.raises(DataError, match="cifar10, cifar100"):
        fetch_cifar("imagenet")


def test_whole_part_file_left_by_a_crash_before_the_rename(tmp_path):
    destination = tmp_path / "file.tar.gz"
    (tmp_path / "file.tar.gz.part").write_bytes(PAYLOAD)  # downloaded, killed before verifying
    with FileServer(PAYLOAD) as server:
        download(server.url, destination, PAYLOAD_MD5, progress=False)
    assert server.ranges == [f"bytes={len(PAYLOAD)}-"] and destination.read_bytes() == PAYLOAD


def test_part_file_longer_than_the_file_restarts(tmp_path):
    destination = tmp_path / "file.tar.gz"
    (tmp_path / "file.tar.gz.part").write_bytes(PAYLOAD + b"junk")
    with FileServer(PAYLOAD) as server:
        download(server.url, destination, PAYLOAD_MD5, progress=False)
    assert server.ranges == [f"bytes={len(PAYLOAD) + 4}-", None] and destination.read_bytes() == PAYLOAD


def official_archive(tmp_path, monkeypatch, seed: int = 0):
    """A small CIFAR-10 archive made the official one for this test (its md5 is the published one)."""
    folder = tmp_path / f"built-{seed}"
    folder.mkdir()
    archive, expected, _ = write_cifar_archive(folder, "cifar10", seed=seed)
    payload = archive.read_bytes()
    fake = Archive("cifar-10-python.tar.gz", "http://unused.invalid/", hashlib.md5(payload).hexdigest(),
                   "RELUATTN_CIFAR10_URL")
    monkeypatch.setitem(download_module.ARCHIVES, "cifar10", fake)
    return payload, expected


def test_cached_archive_with_a_wrong_md5_is_set_aside_and_downloaded_again(tmp_path, monkeypatch):
    payload, expected = official_archive(tmp_path, monkeypatch, seed=0)
    (tmp_path / "other").mkdir()
    impostor = write_cifar_archive(tmp_path / "other", "cifar10", seed=1)[0].read_bytes()  # valid, not official
    stored = tmp_path / "cache" / "downloads" / "cifar-10-python.tar.gz"
    stored.parent.mkdir(parents=True)
    stored.write_bytes(impostor)
    with FileServer(payload) as server:
        monkeypatch.setenv("RELUATTN_CIFAR10_URL", server.url)
        with pytest.warns(DataWarning, match="not the published") as caught:
            data = load_dataset(None, "test", progress=False, cache=False)
    assert len(server.ranges) == 1 and "\n" not in str(caught[0].message)
    np.testing.assert_array_equal(data.images, expected["test"][0])
    assert stored.read_bytes() == payload
    assert stored.with_name("cifar-10-python.tar.gz.md5-mismatch").read_bytes() == impostor  # kept, not deleted


def test_cached_archive_changed_after_download_is_noticed(tmp_path, monkeypatch):
    payload, _ = official_archive(tmp_path, monkeypatch)
    with FileServer(payload) as server:
        monkeypatch.setenv("RELUATTN_CIFAR10_URL", server.url)
        stored = fetch_cifar("cifar10", progress=False)
    stored.write_bytes(payload[:-10] + bytes(10))  # damaged on disk later, same size
    monkeypatch.setenv("RELUATTN_CIFAR10_URL", f"http://127.0.0.1:{closed_port()}/cifar-10-python.tar.gz")
    with pytest.warns(DataWarning, match="not the published"), pytest.raises(DataError, match="could not download"):
        load_dataset(None, "test", progress=False, cache=False)
    assert not stored.exists() and stored.with_name(stored.name + ".md5-mismatch").is_file()
