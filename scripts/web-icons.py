#!/usr/bin/env python3
"""Draws the web console's app icons (web/public/icons/*.png): a terminal's prompt and block cursor, the
console's green on its dark panel. Standard library only (zlib for PNG); run it again after changing the
design: `python3 scripts/web-icons.py`. The SVG beside them (the page's favicon) is the same drawing."""
import os
import struct
import zlib

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "web", "public", "icons")
BACKGROUND = (0x15, 0x17, 0x1A)
PANEL = (0x1D, 0x20, 0x24)
GREEN = (0x3F, 0xB9, 0x50)
SAMPLES = 4  # per axis, for the edges' anti-aliasing


def inside_rounded(x, y, x0, y0, x1, y1, r):
    if x < x0 or x > x1 or y < y0 or y > y1:
        return False
    cx = min(max(x, x0 + r), x1 - r)
    cy = min(max(y, y0 + r), y1 - r)
    return (x - cx) ** 2 + (y - cy) ** 2 <= r * r


def on_segment(x, y, ax, ay, bx, by, half_width):
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy)))
    px, py = ax + t * dx - x, ay + t * dy - y
    return px * px + py * py <= half_width * half_width


def colour_at(u, v, safe):
    """The drawing in a unit square (u, v in 0..1); `safe`: the share kept clear for a maskable icon's crop."""
    # A maskable icon fills its square and keeps the drawing in the middle 80 %; the plain one is a rounded panel.
    if safe == 1.0 and not inside_rounded(u, v, 0.0, 0.0, 1.0, 1.0, 0.18):
        return None
    s = 0.5 - (0.5 - u) / safe, 0.5 - (0.5 - v) / safe
    x, y = s
    if on_segment(x, y, 0.22, 0.32, 0.42, 0.5, 0.055) or on_segment(x, y, 0.42, 0.5, 0.22, 0.68, 0.055):
        return GREEN
    if 0.5 <= x <= 0.78 and 0.6 <= y <= 0.7:
        return GREEN
    return PANEL if safe == 1.0 else BACKGROUND


def png(size, safe):
    rows = []
    for j in range(size):
        row = bytearray([0])
        for i in range(size):
            acc, alpha = [0, 0, 0], 0
            for sj in range(SAMPLES):
                for si in range(SAMPLES):
                    c = colour_at((i + (si + 0.5) / SAMPLES) / size, (j + (sj + 0.5) / SAMPLES) / size, safe)
                    if c is not None:
                        alpha += 1
                        for k in range(3):
                            acc[k] += c[k]
            n = SAMPLES * SAMPLES
            row += bytes([acc[k] // alpha if alpha else 0 for k in range(3)] + [round(255 * alpha / n)])
        rows.append(bytes(row))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b"")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name, size, safe in (("icon-192.png", 192, 1.0), ("icon-512.png", 512, 1.0), ("icon-maskable-512.png", 512, 0.8)):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(png(size, safe))
        print(f"wrote {name}")
