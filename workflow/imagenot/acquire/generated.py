"""Generated images as a download source: deterministic JPEGs for any URL path, made on request.

An ``acquire.url_map`` value ``generate:<seed>[:<size>]`` (instead of a directory) makes the
download job's loopback server answer every path under that URL prefix with a small JPEG seeded
by a hash of (seed, path): the same path always gives the same bytes, different paths different
images. Nobody can pre-render millions of images, so the scale model (``scale_world``) uses it;
any load test may. A source like a local directory, so acquisition knows it without knowing the
demo; NumPy and Pillow only.
"""

from __future__ import annotations

import hashlib
import http.server
import re
import urllib.parse

import numpy as np

GENERATE_PREFIX = "generate:"
GENERATED_IMAGE_SIZE = 64


class UrlMapError(ValueError):
    """An ``acquire.url_map`` value that is neither a directory nor a valid generated source."""


def is_generated(value: str) -> bool:
    """Whether an ``acquire.url_map`` value asks for generated images rather than a directory."""
    return str(value).startswith(GENERATE_PREFIX)


def parse_generated(value: str) -> tuple[int, int]:
    """(seed, image size) of a ``generate:<seed>[:<size>]`` url_map value."""
    match = re.fullmatch(rf"{GENERATE_PREFIX}(\d+)(?::(\d+))?", str(value))
    size = int(match[2] or GENERATED_IMAGE_SIZE) if match else 0
    if not 8 <= size <= 1024:
        raise UrlMapError(
            f"acquire.url_map value {value!r}: expected generate:<seed>[:<size>], a seed >= 0 "
            "and a size in 8..1024"
        )
    return int(match[1]), size


def generated_jpeg(path: str, seed: int, size: int, quality: int = 85) -> bytes:
    """A deterministic JPEG for any URL path: clutter seeded by a hash of (seed, path)."""
    from imagenot.core.clutter import jpeg_bytes, render_clutter

    digest = hashlib.blake2b(f"{seed}\0{path}".encode(), digest_size=16).digest()
    rng = np.random.default_rng(np.frombuffer(digest, dtype=np.uint32))
    return jpeg_bytes(render_clutter(rng, size), quality)


def generated_image_handler(seed: int, size: int) -> type[http.server.BaseHTTPRequestHandler]:
    """An HTTP handler answering every GET with :func:`generated_jpeg` of the request path."""

    class GeneratedImageHandler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            path = urllib.parse.urlsplit(self.path).path
            data = generated_jpeg(path, seed, size)
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format, *args):
            pass

    return GeneratedImageHandler
