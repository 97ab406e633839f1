#!/usr/bin/python3
"""Writes examples/data/digits.txt from scikit-learn's bundled digits.

The data are the 1797 8x8 images of the UCI "Optical Recognition of
Handwritten Digits" test set (Alpaydin & Kaynak, 1998) as scikit-learn ships
them (sklearn.datasets.load_digits): grey levels 0..16, labels 0..9.

The output is plain text so that it diffs well and needs no reader library:
comment lines start with '#', then one line per image,

    <label>:<64 characters>

the pixels in row-major order, each grey level written as one base-17 digit
(0-9 then a-g, so 'g' is 16, the darkest).

    /usr/bin/python3 scripts/convert_digits.py [OUTPUT]

OUTPUT defaults to examples/data/digits.txt beside this script.
"""
import os
import sys

from sklearn.datasets import load_digits

BASE17 = "0123456789abcdefg"
HEADER = """\
# digits.txt: 1797 handwritten digits, 8x8 pixels, grey levels 0..16.
# Source: the UCI "Optical Recognition of Handwritten Digits" data set
# (E. Alpaydin and C. Kaynak, 1998), test part, as redistributed with
# scikit-learn {version} (sklearn.datasets.load_digits) under the
# BSD-3-Clause license; see DIGITS-LICENSE.txt beside this file.
# Written by scripts/convert_digits.py.
# Format: one image per line, "<label>:<64 pixels>", pixels row-major, each
# a base-17 digit 0-9a-g (0 = white background, g = 16 = full ink).
"""


def encode_image(pixels):
    """One base-17 character per grey level, after checking its range."""
    chars = []
    for value in pixels:
        level = int(value)
        if level != value or not 0 <= level <= 16:
            raise ValueError("grey level out of range: %r" % value)
        chars.append(BASE17[level])
    return "".join(chars)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.normpath(os.path.join(here, "..", "examples", "data", "digits.txt"))
    out_path = sys.argv[1] if len(sys.argv) > 1 else default_out

    import sklearn
    digits = load_digits()
    images, labels = digits.data, digits.target
    if images.shape != (1797, 64):
        raise SystemExit("unexpected digits shape %r" % (images.shape,))

    lines = [HEADER.format(version=sklearn.__version__)]
    for label, pixels in zip(labels, images):
        lines.append("%d:%s\n" % (int(label), encode_image(pixels)))

    # written whole, then renamed, so a failed run never leaves half a file
    tmp_path = out_path + ".tmp"
    with open(tmp_path, "w", encoding="ascii", newline="\n") as f:
        f.write("".join(lines))
    os.replace(tmp_path, out_path)
    print("wrote %d images to %s" % (len(labels), out_path))


if __name__ == "__main__":
    main()
