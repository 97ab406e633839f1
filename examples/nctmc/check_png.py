#!/usr/bin/python3
"""Checks the PNG writer of the nctmc tool (png.c) with an independent
decoder: runs test_png (argv[1]) into a temporary directory, then parses
every file it wrote with struct and zlib — signature, chunk CRCs, IHDR,
the zlib stream (whose Adler-32 zlib verifies), the filter bytes — and
compares every pixel with the pattern test_png.c draws. Also opens the files
with PIL when it is installed."""
import os
import struct
import subprocess
import sys
import tempfile
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def pattern(x, y):
    return (x * 7 + y * 13 + x * y) & 0xFF


def read_chunks(data):
    if data[:8] != SIGNATURE:
        raise ValueError("bad signature")
    at, chunks = 8, []
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind = data[at + 4:at + 8]
        body = data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise ValueError("bad CRC in %r chunk" % kind)
        chunks.append((kind, body))
        at += 12 + length
    if at != len(data):
        raise ValueError("trailing bytes")
    return chunks


def decode(path):
    with open(path, "rb") as f:
        chunks = read_chunks(f.read())
    kinds = [k for k, _ in chunks]
    if kinds[0] != b"IHDR" or kinds[-1] != b"IEND" or b"IDAT" not in kinds:
        raise ValueError("chunk order %r" % kinds)
    w, h, depth, colour, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if (depth, colour, comp, filt, interlace) != (8, 0, 0, 0, 0):
        raise ValueError("not 8-bit greyscale: %r" % ((depth, colour, comp, filt, interlace),))
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    if len(raw) != (w + 1) * h:
        raise ValueError("%d bytes of scanlines, want %d" % (len(raw), (w + 1) * h))
    rows = []
    for y in range(h):
        line = raw[y * (w + 1):(y + 1) * (w + 1)]
        if line[0] != 0:
            raise ValueError("row %d has filter %d" % (y, line[0]))
        rows.append(line[1:])
    return w, h, rows


def check_file(path):
    w, h, rows = decode(path)
    want = os.path.basename(path)[len("pattern_"):-len(".png")]
    if "%dx%d" % (w, h) != want:
        raise ValueError("size %dx%d, file name says %s" % (w, h, want))
    for y in range(h):
        for x in range(w):
            if rows[y][x] != pattern(x, y):
                raise ValueError("pixel (%d, %d) is %d, want %d" % (x, y, rows[y][x], pattern(x, y)))
    try:
        from PIL import Image
    except ImportError:
        return "zlib"
    with Image.open(path) as im:
        im.load()
        if im.size != (w, h) or im.mode != "L" or im.getpixel((w - 1, h - 1)) != pattern(w - 1, h - 1):
            raise ValueError("PIL reads it differently: %r %r" % (im.size, im.mode))
    return "zlib+PIL"


def main():
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([os.path.abspath(sys.argv[1]), tmp], cwd=tmp)
        if proc.returncode != 0:
            print("test_png failed (%d)" % proc.returncode)
            return 1
        files = sorted(f for f in os.listdir(tmp) if f.startswith("pattern_"))
        failed = 0
        for name in files:
            try:
                how = check_file(os.path.join(tmp, name))
                print("ok   %s (%s)" % (name, how))
            except Exception as e:  # report every file, then fail
                print("FAIL %s: %s" % (name, e))
                failed += 1
        if len(files) != 5:
            print("FAIL: expected 5 files, found %d" % len(files))
            failed += 1
        print("png: %d passed, %d failed" % (len(files) - failed, failed))
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
