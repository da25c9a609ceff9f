"""The images digits.js reads as the appliance ships them: ``static/examples/digits/sprite.png`` and
``labels.bin``, made by this script.

They are not handwritten digits but a stand-in laid out as MNIST's sprite is: 200 noisy 28x28
grayscale images, one per row of the PNG (784 pixels wide), where digit d is a bright vertical bar at
column band d; ``labels.bin`` holds one byte per image, its digit. A small network learns them in a
few epochs, so the example finishes quickly. To train on MNIST, serve its sprite and labels from an
allowed origin and point digits.js's two URLs at them.

    python docs/examples/digits_data.py    # writes the two files again (the same ones: the seed is fixed)
"""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

SIDE = 28
DIGITS = 200
SEED = 3
FOLDER = Path(__file__).resolve().parents[2] / "static" / "examples" / "digits"


def images(count: int = DIGITS, seed: int = SEED) -> tuple[bytes, bytes]:
    """(pixels, labels): ``count`` images of SIDE x SIDE bytes one after another, and a byte per image."""
    rng = random.Random(seed)
    labels = bytes(rng.randrange(10) for _ in range(count))
    pixels = bytearray()
    for digit in labels:
        image = bytearray(rng.randrange(0, 60) for _ in range(SIDE * SIDE))
        left = 3 + 2 * digit + rng.choice((0, 1))
        for y in range(rng.randrange(2, 6), rng.randrange(22, 27)):
            for x in (left, left + 1, left + 2):
                image[y * SIDE + x] = rng.randrange(200, 256)
        pixels += image
    return bytes(pixels), labels


def png(width: int, height: int, gray: bytes) -> bytes:
    """An 8-bit grayscale PNG of these pixels (row by row)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + gray[y * width : (y + 1) * width] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


if __name__ == "__main__":
    pixels, labels = images()
    FOLDER.mkdir(parents=True, exist_ok=True)
    (FOLDER / "sprite.png").write_bytes(png(SIDE * SIDE, DIGITS, pixels))
    (FOLDER / "labels.bin").write_bytes(labels)
    print(f"wrote {DIGITS} images to {FOLDER}")
