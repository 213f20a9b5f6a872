"""rag.fetch: a verbatim local copy or a download, sha256-checked; one-line errors; nothing half-written."""
import hashlib
import http.server
import socket
import threading
from functools import partial

import pytest

from rag.fetch import FetchError, fetch, sha256_of

BODY = b'{"version": "toy", "data": []}\n' * 1000     # 31,000 bytes
SHA = hashlib.sha256(BODY).hexdigest()
WRONG = "0" * 64


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    """Downloads here go to 127.0.0.1 only: never through a proxy from the environment."""
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")


@pytest.fixture
def server(tmp_path):
    """A local http.server on a free port serving ``tmp_path/www`` (data.json = BODY); its base URL."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "data.json").write_bytes(BODY)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    t.join(5)


def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_local_copy_with_the_right_sha_is_used_without_network(tmp_path):
    local = tmp_path / "shared" / "ds" / "data.json"
    local.parent.mkdir(parents=True)
    local.write_bytes(BODY)
    dest = tmp_path / "public" / "ds" / "data.json"
    url = f"http://127.0.0.1:{closed_port()}/data.json"       # would fail if it were tried
    got = fetch(dest, url, SHA, local=local, timeout_s=2)
    assert got == (dest, str(local), len(BODY)) and got.size == 31_000
    assert dest.read_bytes() == BODY and sha256_of(dest) == SHA
    assert leftovers(dest.parent) == ["data.json"]             # no temporary file left
    assert local.read_bytes() == BODY                          # the source is untouched


def test_local_copy_with_a_wrong_sha_names_both_hashes_and_writes_nothing(tmp_path):
    local = tmp_path / "shared" / "data.json"
    local.parent.mkdir()
    local.write_bytes(BODY[:-1])
    bad = hashlib.sha256(BODY[:-1]).hexdigest()
    dest = tmp_path / "public" / "data.json"
    with pytest.raises(FetchError) as e:
        fetch(dest, "http://127.0.0.1:9/data.json", SHA, local=local, timeout_s=2)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg == (f"{local}: local copy of http://127.0.0.1:9/data.json is not the expected file: "
                   f"sha256 {bad}, expected {SHA}")
    assert not dest.exists() and leftovers(dest.parent) == []


def test_download_with_the_right_sha(tmp_path, server):
    dest = tmp_path / "public" / "ds" / "data.json"
    missing = tmp_path / "shared" / "ds" / "data.json"         # no local copy: download
    got = fetch(dest, f"{server}/data.json", SHA.upper(), local=missing, timeout_s=5)
    assert got == (dest, f"{server}/data.json", 31_000)
    assert dest.read_bytes() == BODY
    assert leftovers(dest.parent) == ["data.json"]


def test_download_replaces_an_old_file_only_when_checked(tmp_path, server):
    dest = tmp_path / "data.json"
    dest.write_bytes(b"old")
    with pytest.raises(FetchError, match=f"sha256 {SHA}, expected {WRONG}$"):
        fetch(dest, f"{server}/data.json", WRONG, timeout_s=5)
    assert dest.read_bytes() == b"old"                         # untouched by a failed fetch
    fetch(dest, f"{server}/data.json", SHA, timeout_s=5)
    assert dest.read_bytes() == BODY
    assert leftovers(tmp_path) == ["data.json", "www"]


def test_download_with_a_wrong_sha_names_both_hashes_and_leaves_nothing(tmp_path, server):
    dest = tmp_path / "public" / "data.json"
    with pytest.raises(FetchError) as e:
        fetch(dest, f"{server}/data.json", WRONG, local=tmp_path / "nope.json", timeout_s=5)
    assert str(e.value) == f"data.json downloaded from {server}/data.json: sha256 {SHA}, expected {WRONG}"
    assert not dest.exists() and leftovers(dest.parent) == []


def test_http_error_names_file_url_and_both_places(tmp_path, server):
    dest = tmp_path / "public" / "gone.json"
    local = tmp_path / "shared" / "gone.json"
    with pytest.raises(FetchError) as e:
        fetch(dest, f"{server}/gone.json", SHA, local=local, timeout_s=5)
    assert str(e.value) == (f"cannot download gone.json from {server}/gone.json (HTTP 404); "
                            f"put it at {local} or at {dest} (sha256 {SHA})")
    assert not dest.exists()


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/x", None])
def test_unreachable_url_is_one_line_naming_file_url_and_destination(tmp_path, url):
    url = url or f"http://127.0.0.1:{closed_port()}/KorQuAD_v1.0_dev.json"
    dest = tmp_path / "data" / "public" / "korquad_v1_dev" / "KorQuAD_v1.0_dev.json"
    local = tmp_path / "shared" / "data" / "korquad_v1_dev" / "KorQuAD_v1.0_dev.json"
    with pytest.raises(FetchError) as e:
        fetch(dest, url, SHA, local=local, timeout_s=2)
    msg = str(e.value)
    assert msg == (f"cannot download KorQuAD_v1.0_dev.json from {url} (ConnectionError); "
                   f"put it at {local} or at {dest} (sha256 {SHA})")
    assert "\n" not in msg
    assert not dest.exists() and leftovers(dest.parent) == []


def test_stage_offline_prints_one_line_per_file_and_exits_1(tmp_path):
    """stages/fetch_data.py with no local copies and unreachable URLs: exit 1, one `error:` line per file."""
    import subprocess
    import sys

    from conftest import ROOT, write_params
    from rag.io import read_params

    p = read_params(ROOT / "params.yaml")
    p["data"]["shared_dir"] = str(tmp_path / "missing")
    p["data"]["dest_dir"] = str(tmp_path / "public")
    p["data"]["timeout_s"] = 2
    for i, f in enumerate(p["data"]["files"].values()):
        f["url"] = f"http://127.0.0.1:9/{i}"
    r = subprocess.run([sys.executable, str(ROOT / "stages" / "fetch_data.py"), "--params",
                        str(write_params(tmp_path / "params.yaml", p))], cwd=ROOT, capture_output=True, text=True)
    lines = r.stderr.splitlines()
    assert r.returncode == 1 and r.stdout == ""
    assert len(lines) == len(p["data"]["files"]) == 4
    assert all(x.startswith("error: cannot download ") and "(ConnectionError); put it at " in x for x in lines)
    assert lines[3].endswith(f"public/korquad_v1_dev/KorQuAD_v1.0_dev.json "
                             f"(sha256 {p['data']['files']['korquad_v1_dev/KorQuAD_v1.0_dev.json']['sha256']})")
    assert not (tmp_path / "public").exists() or not any(x.is_file() for x in (tmp_path / "public").rglob("*"))
