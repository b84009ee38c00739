"""CurveZMQ key files: a secret key is never readable by others, not even while it is written, and
no key is ever overwritten."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from streamlens.wire.keys import KeyFileError, curve_available, make_keys, read_secret_key

pytestmark = pytest.mark.skipif(not curve_available(), reason="this libzmq has no CurveZMQ support")

#: make keys under umask 0 and report every mode the secret file had at any audited operation
#: (each open, chmod, ... of the process) from the moment it existed on
WATCH = """
import os, sys
from pathlib import Path
from streamlens.wire.keys import make_keys

folder = Path(sys.argv[1])
secret = folder / "server.key_secret"
modes = set()

def watch(event, args):
    try:
        modes.add(os.stat(secret).st_mode & 0o777)
    except OSError:
        pass

os.umask(0)
sys.addaudithook(watch)
make_keys(folder, ["server"])
watch("end", ())
print(" ".join(sorted(oct(m) for m in modes)))
"""


def test_a_secret_key_file_is_never_readable_by_others_even_while_written(tmp_path):
    proc = subprocess.run([sys.executable, "-c", WATCH, str(tmp_path / "keys")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0o600"]  # and no other mode, from its creation to the end


def test_modes_under_a_umask_of_zero(tmp_path):
    old = os.umask(0)
    try:
        public, secret, authorized = make_keys(tmp_path / "keys", ["alice"], authorize=("alice",))
    finally:
        os.umask(old)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(public.stat().st_mode) == stat.S_IMODE(authorized.stat().st_mode) == 0o644
    for folder in (tmp_path / "keys", tmp_path / "keys" / "authorized"):
        assert stat.S_IMODE(folder.stat().st_mode) & 0o022 == 0  # nobody else can swap a key in
    assert read_secret_key(secret)[0] == authorized.read_text().split('"')[1].encode()


def test_an_existing_key_is_never_overwritten_and_nothing_else_is_written(tmp_path):
    keys = tmp_path / "keys"
    make_keys(keys, ["server"])
    before = (keys / "server.key_secret").read_bytes()
    with pytest.raises(KeyFileError, match=f"^{keys}/server.key exists; not overwriting a key"):
        make_keys(keys, ["alice", "server"], authorize=("alice",))
    assert (keys / "server.key_secret").read_bytes() == before
    assert sorted(p.name for p in keys.iterdir()) == ["server.key", "server.key_secret"]  # no alice


def test_a_secret_file_alone_is_not_overwritten(tmp_path):
    (tmp_path / "bob.key_secret").write_text("mine")
    with pytest.raises(KeyFileError, match="bob.key_secret exists"):
        make_keys(tmp_path, ["bob"])
    assert (tmp_path / "bob.key_secret").read_text() == "mine" and not (tmp_path / "bob.key").exists()


def test_an_authorized_key_is_not_overwritten(tmp_path):
    (tmp_path / "authorized").mkdir()
    (tmp_path / "authorized" / "alice.key").write_text("the old alice")
    with pytest.raises(KeyFileError, match="authorized/alice.key exists"):
        make_keys(tmp_path, ["alice"], authorize=("alice",))
    assert (tmp_path / "authorized" / "alice.key").read_text() == "the old alice"


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", ""])
def test_a_key_name_is_a_plain_file_name(tmp_path, name):
    with pytest.raises(KeyFileError, match="use letters, digits, '_', '-' and '.' \\(not first\\) in a key name"):
        make_keys(tmp_path / "keys", [name])
    assert not (tmp_path / "keys").exists() and not (tmp_path / "escape.key").exists()
