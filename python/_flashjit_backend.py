"""A self-contained PEP 517 build backend for the flashjit package (pure Python, no
third-party packages): `pip install ./python` works offline, with or without build
isolation, where setuptools or wheel are missing (Python 3.12 venvs have neither).

It writes a wheel of python/flashjit/*.py, plus a libflashjit.so bundled into it when
one lies in python/flashjit/ or $FLASHJIT_BUNDLE_LIBRARY names one (the wheel is then
tagged for this platform). build_editable (pip install -e) points a .pth file at this
directory instead, so the package runs from the checkout and finds the repository's
build/api/libflashjit.so by itself."""
import base64
import hashlib
import io
import os
import re
import sys
import sysconfig
import tarfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "flashjit"
LIBRARY = "libflashjit.so"


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("python/flashjit/__init__.py has no __version__")
    return m.group(1)


def _metadata(version):
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
            f"Summary: Run-time generated, tuned flash-attention kernels for PyTorch "
            f"(ctypes over libflashjit.so)\nRequires-Python: >=3.9\n"
            f"License: see the flashjit repository\n")


def _bundled_library():
    """The libflashjit.so to put in the wheel, or None."""
    env = os.environ.get("FLASHJIT_BUNDLE_LIBRARY")
    if env:
        # pip runs this in python/: a relative path is taken from the repository's root.
        for path in (env, os.path.join(os.path.dirname(HERE), env)):
            if os.path.isfile(path):
                return path
        raise RuntimeError(f"$FLASHJIT_BUNDLE_LIBRARY is {env!r}: no such file (give an "
                           f"absolute path, or one relative to the repository's root)")
    path = os.path.join(HERE, NAME, LIBRARY)
    return path if os.path.isfile(path) else None


def _platform_tag():
    return re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _write_wheel(directory, files, tag):
    """files: [(arcname, bytes)]; writes the wheel and returns its basename."""
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    wheel_name = f"{NAME}-{version}-{tag}.whl"
    files = list(files) + [
        (f"{dist_info}/METADATA", _metadata(version).encode()),
        (f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: {NAME} _flashjit_backend\n"
                                f"Root-Is-Purelib: {'true' if tag.endswith('-any') else 'false'}"
                                f"\nTag: {tag}\n").encode()),
        (f"{dist_info}/top_level.txt", f"{NAME}\n".encode()),
    ]
    record = [_record_line(name, data) for name, data in files]
    record.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    stamp = time.gmtime(max(315532800, int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))))[:6]
    with zipfile.ZipFile(os.path.join(directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel_name


def _package_files():
    out = []
    pkg = os.path.join(HERE, NAME)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as f:
                out.append((f"{NAME}/{name}", f.read()))
    return out


# ---- PEP 517 ----------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = _package_files()
    library = _bundled_library()
    tag = "py3-none-any"
    if library:
        with open(library, "rb") as f:  # follows the build tree's symlink
            files.append((f"{NAME}/{LIBRARY}", f.read()))
        tag = f"py3-none-{_platform_tag()}"
    return _write_wheel(wheel_directory, files, tag)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    files = [(f"__editable__.{NAME}.pth", (HERE + "\n").encode())]
    return _write_wheel(wheel_directory, files, "py3-none-any")


def build_sdist(sdist_directory, config_settings=None):
    version = _version()
    base = f"{NAME}-{version}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        members = ["pyproject.toml", "_flashjit_backend.py"] + \
            [arc for arc, _ in _package_files()]
        for rel in members:
            tar.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        data = _metadata(version).encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return name


if __name__ == "__main__":  # python3 python/_flashjit_backend.py DIR: a wheel into DIR
    print(build_wheel(sys.argv[1] if len(sys.argv) > 1 else "."))
